import express, { type RequestHandler } from 'express';

import { InvalidRequestError, PayloadTooLargeError, RollcallError, UnsupportedMediaTypeError } from '../domain/errors';

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

/** express.json, its errors in the contract's shape. */
export function readJsonBody(limit: string): RequestHandler {
  const parse = express.json({ limit });
  return (req, res, next) => parse(req, res, (error?: unknown) => next(error === undefined ? undefined : bodyError(error)));
}
