import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import { TLSSocket } from 'node:tls';

/** The part of a fetch request the client uses. */
export interface HttpRequest {
  method: string;
  headers: Record<string, string>;
  body?: string;
  signal?: AbortSignal;
}

/** The part of a fetch answer the client uses. */
export interface HttpAnswer {
  ok: boolean;
  status: number;
  text(): Promise<string>;
  /** The answer's headers (fetch has them; a send function of its own may leave them out). */
  headers?: { get(name: string): string | null };
}

/** How the client sends a request: the global `fetch` is one, `httpSend()` (the default) another. */
export type HttpSend = (url: string, request: HttpRequest) => Promise<HttpAnswer>;

/**
 * Methods sent again on a fresh connection when a kept-alive one was found closed: those whose
 * second sending also answers as the first would. Not PUT and DELETE, although idempotent (RFC
 * 9110): a DELETE that the service carried out before the connection broke would be answered 404
 * the second time, a success reported as a failure.
 */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * How long an idle connection is kept: 4 s, as Node's fetch (undici) keeps one when the server does
 * not say, since a proxy may close idle connections early without saying. A server that announces a
 * shorter `Keep-Alive: timeout` is believed, less a second (Node's agent does this only when a bound
 * is set). A request that runs longer is not cut by it (a wait takes up to 60 s).
 */
const IDLE_CONNECTION_MS = 4000;

/** How long a new connection may take to open by default, as with fetch (undici's default). */
const CONNECT_TIMEOUT_MS = 10_000;

/** Redirects followed, as fetch follows them: 307/308 for any method, 301/302/303 for GET and HEAD. */
const MAX_REDIRECTS = 20;
const KEEPS_METHOD = new Set([307, 308]);
const TO_GET = new Set([301, 302, 303]);

/**
 * The longest answer read, in characters: far above any rollcall sends (an add of 10,000,000 items in
 * groups of 8 lists 1.25M groups, ~73M characters), and below V8's longest string (~512 Mi characters), past
 * which appending the next chunk threw inside the socket's data listener and ended the process. Only
 * something else answers this much (a wrong `baseUrl`, a proxy streaming a file).
 */
export const MAX_ANSWER_CHARS = 2 ** 28;

/** The code of the error for an answer longer than MAX_ANSWER_CHARS; not sent again (retry.ts). */
export const ANSWER_TOO_LARGE = 'ERR_ANSWER_TOO_LARGE';

/**
 * One pool for every client in the process, as fetch has one: a program that makes a client per
 * job keeps a handful of connections, not one per client.
 */
const AGENTS = {
  http: new http.Agent({ keepAlive: true, timeout: IDLE_CONNECTION_MS }),
  https: new https.Agent({ keepAlive: true, timeout: IDLE_CONNECTION_MS }),
};

export interface HttpSendOptions {
  /** How long a new connection may take to open. Default 10 s, as with fetch; Infinity for no limit of its own (the request's time limit still holds). */
  connectTimeoutMs?: number;
}

interface Attempt {
  connectTimeoutMs: number;
  /** Whether a request that finds its kept-alive connection closed may be sent again. */
  mayResend: boolean;
  /** A resend takes a connection of its own, not another pooled one that may be as stale. */
  pooled: boolean;
  redirects: number;
}

/**
 * Requests over Node's http/https with kept-alive connections. A busy worker sends an ack call every
 * few milliseconds, and Node's fetch costs ~300 µs of CPU a call (web streams, a Headers object, an
 * AbortController each) against ~50 µs here: BullMQ end to end ran 5–7 % more jobs/s with this
 * (docs/benchmarks.md).
 *
 * A kept-alive connection that the server closed while it was idle fails the next request sent on
 * it before any answer; such a request is sent again once, on a new connection, when its method is
 * idempotent. Other requests fail as they would with fetch (the integrations retry acks, which are
 * safe to repeat). Errors are Node's own: a network error with its `code` (`ECONNREFUSED`, …), the
 * time limit as an `AbortError` whose `cause` is the signal's reason.
 */
export function httpSend(options: HttpSendOptions = {}): HttpSend {
  const connectTimeoutMs = connectLimitOf(options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS);
  return (url, request) => send(new URL(url), request, { connectTimeoutMs, mayResend: IDEMPOTENT.has(request.method), pooled: true, redirects: 0 });
}

function send(url: URL, request: HttpRequest, attempt: Attempt): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const secure = url.protocol === 'https:';
    const headers = request.body === undefined ? request.headers : { ...request.headers, 'content-length': String(Buffer.byteLength(request.body)) };
    const agent = attempt.pooled ? (secure ? AGENTS.https : AGENTS.http) : false;
    let answered = false;
    const req = (secure ? https : http).request(url, { method: request.method, headers, agent, signal: request.signal }, (res) => {
      answered = true;
      const status = res.statusCode ?? 0;
      const next = redirected(url, request, status, res.headers.location, attempt.redirects);
      if (next) {
        res.resume();
        return resolve(
          send(next.url, next.request, { ...attempt, mayResend: IDEMPOTENT.has(next.request.method), pooled: true, redirects: attempt.redirects + 1 }),
        );
      }
      res.setEncoding('utf8');
      let text = '';
      res.on('data', (chunk: string) => {
        if (text.length + chunk.length <= MAX_ANSWER_CHARS) return void (text += chunk);
        text = '';
        res.destroy(answerTooLarge(url));
      });
      res.on('error', reject);
      res.on('end', () => resolve({ ok: status >= 200 && status < 300, status, text: () => Promise.resolve(text), headers: headersOf(res) }));
    });
    req.on('socket', (socket) => limitConnect(req, socket, attempt.connectTimeoutMs));
    req.on('error', (error: NodeJS.ErrnoException) => {
      const staleConnection = req.reusedSocket && !answered && error.code === 'ECONNRESET';
      if (staleConnection && attempt.mayResend) resolve(send(url, request, { ...attempt, mayResend: false, pooled: false }));
      else reject(error);
    });
    req.end(request.body);
  });
}

function answerTooLarge(url: URL): NodeJS.ErrnoException {
  const error: NodeJS.ErrnoException = new Error(`the answer from ${url.origin} is longer than ${MAX_ANSWER_CHARS} characters: not rollcall's`);
  error.code = ANSWER_TOO_LARGE;
  return error;
}

/** An answer's headers as fetch reads them: by name, any case; a repeated header joined with ", ". */
function headersOf(res: http.IncomingMessage): NonNullable<HttpAnswer['headers']> {
  return {
    get(name) {
      const value = res.headers[name.toLowerCase()];
      return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value;
    },
  };
}

/** Where a redirect answer sends the request, if it is one fetch would follow; its credentials stay with its origin. */
function redirected(url: URL, request: HttpRequest, status: number, location: string | undefined, redirects: number) {
  const follows = KEEPS_METHOD.has(status) || (TO_GET.has(status) && (request.method === 'GET' || request.method === 'HEAD'));
  if (!follows || location === undefined || redirects >= MAX_REDIRECTS || !URL.canParse(location, url.href)) return null;
  const next = new URL(location, url);
  if (next.origin === url.origin) return { url: next, request };
  const headers = Object.fromEntries(Object.entries(request.headers).filter(([name]) => name.toLowerCase() !== 'authorization'));
  return { url: next, request: { ...request, headers } };
}

/** The longest a timer waits; a longer or infinite connect limit is none (the request's own time limit still holds). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** `connectTimeoutMs` as a timer takes it: Infinity (or more than a timer holds) is no limit, a non-positive one a mistake. */
function connectLimitOf(ms: number): number {
  if (!(ms > 0)) throw new RangeError(`connectTimeoutMs must be a positive number of milliseconds (or Infinity for no limit), not ${ms}`);
  return ms > MAX_TIMER_MS ? Infinity : Math.ceil(ms);
}

/**
 * Fails a request whose connection does not open within `ms` (a kept-alive one is already open).
 * Over https the connection is open once its TLS handshake is done, as with fetch: a server that
 * takes the TCP connection and never answers the handshake is not an open connection.
 */
function limitConnect(req: http.ClientRequest, socket: Socket, ms: number): void {
  if (!socket.connecting || ms === Infinity) return;
  const timer = setTimeout(() => {
    const error: NodeJS.ErrnoException = new Error(`connecting to ${req.host} took longer than ${ms} ms`);
    error.code = 'ETIMEDOUT';
    req.destroy(error);
  }, ms);
  timer.unref();
  const clear = () => clearTimeout(timer);
  socket.once(socket instanceof TLSSocket ? 'secureConnect' : 'connect', clear);
  req.once('close', clear);
}
