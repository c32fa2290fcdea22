import type { Duplex } from 'node:stream';

import type { ErrorRequestHandler, Request, Response } from 'express';

import { HELD_BATCHES_HEADER } from '../contract/vocabulary';
import { LockHeldError, RollcallError, toError } from '../domain/errors';
import { LogEvery } from '../domain/logEvery';
import { countAsCutByServer } from './httpMetrics';

interface ErrorBody {
  error: { code: string; message: string };
}

const body = (code: string, message: string): ErrorBody => ({ error: { code, message } });

/** Codes for the client errors of express's libraries (http-errors), by status. */
const LIBRARY_CODES: Record<number, string> = { 404: 'not_found', 412: 'precondition_failed', 416: 'range_not_satisfiable' };

type LibraryError = Error & { status?: unknown; expose?: unknown; headers?: unknown };

/**
 * Errors of express and its libraries: a path parameter that is not valid percent-encoding
 * (`%E0%A4%A`) is a URIError marked status 400; `sendFile` refuses a `Range` it cannot serve (416)
 * or an `If-Match` or `If-Unmodified-Since` the file does not meet (412) with an http-error whose
 * status is a 4xx and whose message may be shown (`expose`).
 */
function fromLibraries(error: LibraryError): [number, ErrorBody] | null {
  const { status } = error;
  if (error instanceof URIError && status === 400) return [400, body('invalid_request', error.message)];
  if (typeof status === 'number' && status >= 400 && status < 500 && error.expose === true) {
    return [status, body(LIBRARY_CODES[status] ?? 'invalid_request', error.message)];
  }
  return null;
}

/**
 * Drops what a file being sent had set before it was refused (its type, which res.json would keep,
 * and its validators), none of which describes the JSON error; the error's own headers (a 416's
 * Content-Range) are set again.
 */
function forgetFileHeaders(res: Response, error: LibraryError): void {
  for (const name of ['content-type', 'content-length', 'content-range', 'etag', 'last-modified', 'accept-ranges']) res.removeHeader(name);
  if (typeof error.headers === 'object' && error.headers !== null) {
    for (const [name, value] of Object.entries(error.headers)) if (typeof value === 'string') res.setHeader(name, value);
  }
}

const REFUSAL_LOG_EVERY_MS = 1_000;

/**
 * The most held batches one answer names (3.8 KB): far below the 16 KiB of response headers Node's
 * client, and a proxy's buffer, take. A client sends the acks of batches not named apart; those of
 * held batches left unnamed stay with the named ones until a later answer names them.
 */
const HELD_BATCHES_NAMED = 100;

/**
 * Logs a refusal (a 429 with its limit at info, a 503 with its error at warn) at most once a second
 * per tenant and code, the rest at debug: a tenant past a limit, or every caller while the database is away, may
 * be refused thousands of times a second.
 */
function logRefusal(logged: LogEvery, req: Request, status: 429 | 503, code: string, error: Error): void {
  const tenant = req.caller?.tenant;
  const quieted = logged.due(`${status}\u0000${code}\u0000${tenant}`, performance.now());
  const level = quieted === null ? 'debug' : status === 503 ? 'warn' : 'info';
  const counted = quieted ? { quieted } : {};
  if (status === 503) req.log[level]({ err: error, code, tenant, ...counted }, 'request answered 503');
  else req.log[level]({ code, tenant, reason: error.message, ...counted }, 'request answered 429');
}

/**
 * The one place errors become HTTP answers: typed errors by their status and code (a body that
 * could not be read becomes one in readJsonBody), the router's by their kind, anything else a 500
 * whose message says nothing of the internals. One per app.
 */
export function errorHandler(): ErrorRequestHandler {
  const refusalsLogged = new LogEvery(REFUSAL_LOG_EVERY_MS);
  return (caught, req, res, _next) => {
    const error = toError(caught);
    if (res.headersSent) {
      // An answer already on its way (a file that failed mid-read) cannot become an error: cut it short.
      req.log.error({ err: error }, 'request failed after its answer began');
      countAsCutByServer(res);
      return void res.destroy();
    }
    let answer: [number, ErrorBody];
    if (error instanceof RollcallError) answer = [error.status, body(error.code, error.message)];
    else answer = fromLibraries(error) ?? [500, body('internal', 'internal error')];
    if (!(error instanceof RollcallError)) forgetFileHeaders(res, error);
    const [status] = answer;
    if (status === 503) {
      // Busy or down, not broken: worth a retry shortly (API.md, "Input limits that protect other callers").
      res.setHeader('retry-after', '1');
      if (error instanceof LockHeldError && error.heldBatchIds.length > 0)
        res.setHeader(HELD_BATCHES_HEADER, error.heldBatchIds.slice(0, HELD_BATCHES_NAMED).join(', '));
      logRefusal(refusalsLogged, req, status, answer[1].error.code, error);
    } else if (status === 429) {
      if (!res.hasHeader('retry-after')) res.setHeader('retry-after', '1'); // a rate limit's says when its window ends
      logRefusal(refusalsLogged, req, status, answer[1].error.code, error);
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

/**
 * The server's `clientError` listener: answers as above unless an earlier request on the connection
 * is still being answered (`_httpMessage`, the response Node attaches to the socket, whose request
 * arrived whole: a client that pipelines would take this answer for that request's), then closes
 * it. A kept-alive connection whose earlier answers have ended gets its answer too.
 */
export function answerClientError(error: Error & { code?: string }, socket: Duplex): void {
  const [status, reason, code, message] = PARSER_REFUSALS[error.code ?? ''] ?? [400, 'Bad Request', 'invalid_request', 'the request is not valid HTTP/1.1'];
  const answering = (socket as Duplex & { _httpMessage?: { headersSent: boolean; req?: { complete: boolean } } | null })._httpMessage;
  // The response attached is this request's own while its body is still arriving (a bad chunk, a
  // body too slow): answered then. Once that request is whole, the refusal is of a later one.
  const ofAnEarlierRequest = answering !== null && answering !== undefined && (answering.headersSent || answering.req?.complete !== false);
  if (error.code === 'ECONNRESET' || !socket.writable || ofAnEarlierRequest) return void socket.destroy();
  const json = JSON.stringify(body(code, message));
  refused.add(socket);
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: ${Buffer.byteLength(json)}\r\nConnection: close\r\n\r\n${json}`,
  );
  // The server's sockets stay open for reading after their end, and Node times out no request it
  // has refused: a client that kept sending after a 408 held the body read so far for as long as it
  // liked. The client gets a moment to read the answer (closed as it went, the answer could be lost
  // to a reset while the client still sent), then the connection closes.
  setTimeout(() => socket.destroy(), REFUSAL_LINGER_MS).unref();
}

/** How long a refused connection stays open for its client to read the answer. */
const REFUSAL_LINGER_MS = 1_000;

/** Connections answered by answerClientError: whatever arrives on them after is not acted on. */
const refused = new WeakSet<Duplex>();

/**
 * Whether the connection was refused (answerClientError) while this request's body was arriving:
 * after a 408 the parser still takes the body, and one that then came whole would run its route
 * after the client was told it was not done.
 */
export function wasRefused(socket: Duplex): boolean {
  return refused.has(socket);
}
