import http from 'node:http';
import https from 'node:https';

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
}

/** How the client sends a request: the global `fetch` is one, `httpSend()` (the default) another. */
export type HttpSend = (url: string, request: HttpRequest) => Promise<HttpAnswer>;

/** Methods that mean the same when sent twice (RFC 9110), and so may be sent again on a fresh connection. */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS']);

/**
 * How long an idle connection is kept: 4 s, as Node's fetch (undici) keeps one when the server does
 * not say, since a proxy may close idle connections early without saying. A server that announces a
 * shorter `Keep-Alive: timeout` is believed, less a second (Node's agent does this only when a bound
 * is set). A request that runs longer is not cut by it (a wait takes up to 60 s).
 */
const IDLE_CONNECTION_MS = 4000;

/**
 * Requests over Node's http/https with kept-alive connections. A busy worker sends an ack call every
 * few milliseconds, and Node's fetch costs ~300 µs of CPU a call (web streams, a Headers object, an
 * AbortController each) against ~50 µs here: BullMQ end to end ran 5–7 % more jobs/s with this
 * (docs/benchmarks.md).
 *
 * A kept-alive connection that the server closed while it was idle fails the next request sent on
 * it before any answer; such a request is sent again once, on a new connection, when its method is
 * idempotent. Other requests fail as they would with fetch (the integrations retry acks, which are
 * safe to repeat).
 */
export function httpSend(): HttpSend {
  const agents = {
    http: new http.Agent({ keepAlive: true, timeout: IDLE_CONNECTION_MS }),
    https: new https.Agent({ keepAlive: true, timeout: IDLE_CONNECTION_MS }),
  };
  const send = (url: URL, request: HttpRequest, mayResend: boolean): Promise<HttpAnswer> =>
    new Promise((resolve, reject) => {
      const secure = url.protocol === 'https:';
      const headers = request.body === undefined ? request.headers : { ...request.headers, 'content-length': String(Buffer.byteLength(request.body)) };
      const options = { method: request.method, headers, agent: secure ? agents.https : agents.http, signal: request.signal };
      const req = (secure ? https : http).request(url, options, (res) => {
        res.setEncoding('utf8');
        let text = '';
        res.on('data', (chunk: string) => (text += chunk));
        res.on('error', reject);
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          resolve({ ok: status >= 200 && status < 300, status, text: () => Promise.resolve(text) });
        });
      });
      req.on('error', (error: NodeJS.ErrnoException) => {
        if (mayResend && req.reusedSocket && error.code === 'ECONNRESET') resolve(send(url, request, false));
        else reject(error);
      });
      req.end(request.body);
    });
  return (url, request) => send(new URL(url), request, IDEMPOTENT.has(request.method));
}
