import type { RequestHandler } from 'express';
import { InvalidRequestError } from '../domain/errors';

/**
 * A request that carries a body must carry JSON: otherwise express.json leaves `req.body` unset and
 * the route would take the request for one without a body (an empty create, a plain seal).
 */
export const requireJsonBody: RequestHandler = (req, _res, next) => {
  const hasBody = Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined;
  // The exact header most clients send is checked first; type-is parses the header otherwise.
  if (hasBody && req.headers['content-type'] !== 'application/json' && !req.is('application/json')) {
    return next(new InvalidRequestError(`the body must be application/json, not ${req.headers['content-type'] ?? 'untyped'}`));
  }
  next();
};
