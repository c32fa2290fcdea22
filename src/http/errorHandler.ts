import type { Duplex } from 'node:stream';

import type { ErrorRequestHandler, Request } from 'express';

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

const REFUSAL_LOG_EVERY_MS = 1_000;

/**
 * Logs a 429 with its limit and tenant at info at most once a second per tenant and code, the rest
 * at debug: a tenant past a limit may send thousands a second. `logged`: when each was last logged.
 */
function logRefusal(logged: Map<string, number>, req: Request, code: string, reason: string): void {
  const tenant = req.caller?.tenant;
  const key = `${code}\u0000${tenant}`;
  const now = performance.now();
  const due = (logged.get(key) ?? -Infinity) + REFUSAL_LOG_EVERY_MS <= now;
  if (due) {
    if (logged.size >= 10_000) logged.clear(); // tenants are bounded by API_TOKENS; a bound all the same
    logged.set(key, now);
  }
  req.log[due ? 'info' : 'debug']({ code, tenant, reason }, 'request answered 429');
}

/**
 * The one place errors become HTTP answers: typed errors by their status and code (a body that
 * could not be read becomes one in readJsonBody), the router's by their kind, anything else a 500
 * whose message says nothing of the internals. One per app.
 */
export function errorHandler(): ErrorRequestHandler {
  const refusalsLogged = new Map<string, number>();
  return (caught, req, res, _next) => {
    const error = toError(caught);
    let answer: [number, ErrorBody];
    if (error instanceof RollcallError) answer = [error.status, body(error.code, error.message)];
    else answer = fromRouter(error) ?? [500, body('internal', 'internal error')];
    const [status] = answer;
    if (status === 503) {
      // Busy or down, not broken: worth a retry shortly (API.md, "Input limits that protect other callers").
      res.setHeader('retry-after', '1');
      req.log.warn({ err: error }, 'request answered 503');
    } else if (status === 429) {
      if (!res.hasHeader('retry-after')) res.setHeader('retry-after', '1'); // a rate limit's says when its window ends
      logRefusal(refusalsLogged, req, answer[1].error.code, error.message);
    } else if (status >= 500) req.log.error({ err: error }, 'request failed');
    else req.log.debug({ err: error }, 'request refused');
    res.status(status).json(answer[1]);
  };
}

/**
 * What Node's HTTP parser refuses before express sees a request (headers past 16 KiB, a malformed
 * request line or header, a request that did not arrive in time): Node answers these with an empty
 * body; here they get the contract's error shape. By Node's own choice of status (_http_server.js).
 */
const PARSER_REFUSALS: Record<string, [status: number, reason: string, code: string, message: string]> = {
  HPE_HEADER_OVERFLOW: [431, 'Request Header Fields Too Large', 'headers_too_large', 'the request line and headers are larger than the server takes (16 KiB)'],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: [413, 'Payload Too Large', 'payload_too_large', 'the chunk extensions of the body are too large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'Request Timeout', 'request_timeout', 'the request did not arrive in time'],
};

/** The server's `clientError` listener: answers as above on a connection that has had no answer yet, then closes it. */
export function answerClientError(error: Error & { code?: string }, socket: Duplex): void {
  const [status, reason, code, message] = PARSER_REFUSALS[error.code ?? ''] ?? [400, 'Bad Request', 'invalid_request', 'the request is not valid HTTP/1.1'];
  const written = (socket as Duplex & { bytesWritten?: number }).bytesWritten ?? 0;
  if (error.code === 'ECONNRESET' || !socket.writable || written > 0) return void socket.destroy();
  const json = JSON.stringify(body(code, message));
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(json)}\r\nConnection: close\r\n\r\n${json}`,
  );
}
