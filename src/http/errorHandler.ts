import type { ErrorRequestHandler } from 'express';

import { RollcallError, toError } from '../domain/errors';

interface ErrorBody {
  error: { code: string; message: string };
}

const body = (code: string, message: string): ErrorBody => ({ error: { code, message } });

/** body-parser's own errors carry a `type` and an HTTP status. */
function fromBodyParser(error: Error): [number, ErrorBody] | null {
  const { type, status } = error as Error & { type?: unknown; status?: unknown };
  if (typeof type !== 'string' || typeof status !== 'number') return null;
  if (status === 413) return [413, body('payload_too_large', 'the request body is larger than this service accepts')];
  if (type === 'entity.parse.failed') return [400, body('invalid_request', 'the body is not valid JSON')];
  if (status >= 400 && status < 500) return [400, body('invalid_request', error.message)];
  return null;
}

/**
 * The one place errors become HTTP answers: typed errors by their status and code, body-parser's
 * by type, anything else a 500 whose message says nothing of the internals.
 */
export const errorHandler: ErrorRequestHandler = (caught, req, res, _next) => {
  const error = toError(caught);
  let answer: [number, ErrorBody];
  if (error instanceof RollcallError) answer = [error.status, body(error.code, error.message)];
  else answer = fromBodyParser(error) ?? [500, body('internal', 'internal error')];
  const [status] = answer;
  if (status === 503) {
    // Busy or down, not broken: worth a retry shortly (API.md, "Input limits that protect other callers").
    res.setHeader('retry-after', '1');
    req.log.warn({ err: error }, 'request answered 503');
  } else if (status >= 500) req.log.error({ err: error }, 'request failed');
  else req.log.debug({ err: error }, 'request refused');
  res.status(status).json(answer[1]);
};
