import type { ErrorRequestHandler } from 'express';

import { RollcallError, toError } from '../domain/errors';

interface ErrorBody {
  error: { code: string; message: string };
}

const body = (code: string, message: string): ErrorBody => ({ error: { code, message } });

/**
 * Errors of express's router: a path parameter that is not valid percent-encoding (`%E0%A4%A`) is a
 * URIError marked status 400.
 */
function fromRouter(error: Error): [number, ErrorBody] | null {
  const { status } = error as Error & { status?: unknown };
  if (error instanceof URIError && status === 400) return [400, body('invalid_request', error.message)];
  return null;
}

/**
 * The one place errors become HTTP answers: typed errors by their status and code (a body that
 * could not be read becomes one in readJsonBody), the router's by their kind, anything else a 500
 * whose message says nothing of the internals.
 */
export const errorHandler: ErrorRequestHandler = (caught, req, res, _next) => {
  const error = toError(caught);
  let answer: [number, ErrorBody];
  if (error instanceof RollcallError) answer = [error.status, body(error.code, error.message)];
  else answer = fromRouter(error) ?? [500, body('internal', 'internal error')];
  const [status] = answer;
  if (status === 503) {
    // Busy or down, not broken: worth a retry shortly (API.md, "Input limits that protect other callers").
    res.setHeader('retry-after', '1');
    req.log.warn({ err: error }, 'request answered 503');
  } else if (status >= 500) req.log.error({ err: error }, 'request failed');
  else req.log.debug({ err: error }, 'request refused');
  res.status(status).json(answer[1]);
};
