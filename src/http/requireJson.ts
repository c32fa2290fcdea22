import express, { type Request, type RequestHandler } from 'express';

import { InvalidRequestError, PayloadTooLargeError, RollcallError, UnsupportedMediaTypeError } from '../domain/errors';
import { wasRefused } from './errorHandler';

/** Content types a plain HTML form can send cross-site without a CORS preflight. */
const FORM_TYPES = new Set(['application/x-www-form-urlencoded', 'multipart/form-data', 'text/plain']);

/** The media type of a Content-Type header, without parameters, lower case. */
const mediaType = (header: string): string => (header.split(';', 1)[0] as string).trim().toLowerCase();

/**
 * A request that carries a body must carry JSON: otherwise express.json leaves `req.body` unset and
 * the route would take the request for one without a body (an empty create, a plain seal). A
 * content type a form can send is refused even with an empty body: a cross-site form POST to a
 * token-less service must change nothing (docs/security.md).
 */
export const requireJsonBody: RequestHandler = (req, _res, next) => {
  const type = req.headers['content-type'];
  // The exact header most clients send is checked first, so the hot path parses nothing.
  if (type === 'application/json') return next();
  if (type !== undefined && req.method !== 'GET' && req.method !== 'HEAD' && FORM_TYPES.has(mediaType(type))) {
    return next(new UnsupportedMediaTypeError(`${mediaType(type)} is not accepted: send application/json`));
  }
  const hasBody = Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined;
  if (hasBody && !req.is('application/json')) {
    return next(new InvalidRequestError(`the body must be application/json, not ${type ?? 'untyped'}`));
  }
  next();
};

/**
 * What went wrong reading a body, as the contract's error: anything that fails there (a body over
 * the limit, JSON that does not parse, a compressed body that does not inflate, a client gone
 * mid-body) is the client's to fix. body-parser types most of its errors, but passes zlib's on as
 * they are (`incorrect header check`), which would otherwise answer 500.
 */
function bodyError(caught: unknown): RollcallError {
  const error: Error & { type?: unknown; status?: unknown } = caught instanceof Error ? caught : new Error(String(caught));
  if (error.status === 413) return new PayloadTooLargeError('the request body is larger than this service accepts');
  if (error.type === 'entity.parse.failed') return new InvalidRequestError('the body is not valid JSON');
  if (typeof error.type === 'string') return new InvalidRequestError(error.message);
  return new InvalidRequestError(`the body could not be read: ${error.message}`);
}

declare module 'express-serve-static-core' {
  interface Request {
    /** Reads the body (readJsonBody), once the route has let the caller through (requireScope). */
    readBody?: (then: (error?: unknown) => void) => void;
  }
}

/**
 * express.json, its errors in the contract's shape, read when the route's scope check lets the
 * caller through (requireScope calls `req.readBody`): a token that may not make the request is
 * answered 403 whatever its body, which is not read (up to BODY_LIMIT) nor parsed for it.
 */
export function readJsonBody(limit: string): RequestHandler {
  const parse = express.json({ limit });
  return (req, res, next) => {
    req.readBody = (then) => {
      req.readBody = undefined;
      parse(req, res, (error?: unknown) => {
        if (wasRefused(req.socket)) return; // answered 408 already: the body came too late
        then(error === undefined ? undefined : bodyError(error));
      });
    };
    next();
  };
}

/** Goes on to `next` once the body, if one is still to be read, has been read. */
export function afterBody(req: Request, next: (error?: unknown) => void): void {
  if (req.readBody) req.readBody(next);
  else next();
}
