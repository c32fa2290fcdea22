import http from 'node:http';
import type { Socket } from 'node:net';

import type { Express } from 'express';

import { answerClientError } from './errorHandler';
import { countAsCutByServer } from './httpMetrics';

// `any[]`: TypeScript lets a class extend a constructor value only when it takes `...args: any[]`.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Constructor<T> = new (...args: any[]) => T;

/** A subclass of `base` whose instances also inherit everything `prototype` holds. */
function subclassWith<T extends object>(base: Constructor<T>, prototype: object): Constructor<T> {
  const Subclass = class extends (base as Constructor<object>) {};
  Object.setPrototypeOf(Subclass.prototype, prototype);
  return Subclass as unknown as Constructor<T>;
}

/**
 * The HTTP server for an express app, whose requests and responses are created with the app's
 * prototypes from the start, and whose parser's refusals are answered in the API's error shape.
 *
 * Express's `app.handle` otherwise swaps the prototype of every request and response
 * (`Object.setPrototypeOf(req, app.request)`). V8 then builds new hidden classes and misses its
 * inline caches all along the request path: a third of the service's CPU on a one-ID ack went
 * there (expressjs/express#5998). Here node's server constructs requests and responses as
 * subclasses that already inherit `app.request` and `app.response`, and those two become the
 * subclasses' prototypes, so the swap in `app.handle` finds nothing to change. Every method and
 * property express or this service put on `app.request` stays reachable one step up the chain.
 */
export function createServer(app: Express, { requestTimeoutMs = DEFAULT_REQUEST_TIMEOUT_MS }: ServerOptions = {}): http.Server {
  const timeouts = {
    requestTimeout: requestTimeoutMs,
    headersTimeout: Math.min(HEADERS_TIMEOUT_MS, requestTimeoutMs), // Node refuses one longer than requestTimeout
    // Node looks for requests past their time this often (30 s by default): a 1 s limit was 31 s.
    connectionsCheckingInterval: Math.min(30_000, Math.max(250, requestTimeoutMs / 4)),
  };
  // A missing Host is the app's to refuse (requireHostOnHttp11), in the API's error shape; Node's own
  // 400 had an empty body.
  const server = http.createServer({ ...messageClassesOf(app), ...timeouts, requireHostHeader: false }, app).on('clientError', answerClientError);
  // An expectation other than 100-continue (`Expect: foo`) is ignored, as RFC 9110 allows: the
  // request is served. Node's own answer was a bare 417, with no body and past every metric.
  server.on('checkExpectation', (req: http.IncomingMessage, res: http.ServerResponse) => server.emit('request', req, res));
  const open = new Set<http.ServerResponse>();
  const answered = (res: http.ServerResponse) => {
    open.delete(res);
    if (open.size === 0 && draining.has(server)) cutUnansweredConnections(server);
    // A body still arriving behind this answer (pipelined) is at the head of its connection now.
    else if (bodiesOverdue.has(server)) cutUnfinishedBodies(server);
  };
  const sockets = new Map<Socket, Set<http.ServerResponse>>();
  server.on('connection', (socket: Socket) => {
    const onSocket = new Set<http.ServerResponse>();
    sockets.set(socket, onSocket);
    // A pipelined request's answer waits for the one before it; if the connection ends first (the
    // client went, or the answer before it closed the connection), that answer never closes.
    socket.once('close', () => {
      sockets.delete(socket);
      for (const res of onSocket) answered(res);
    });
  });
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    open.add(res);
    const onSocket = sockets.get(req.socket);
    onSocket?.add(res);
    res.once('close', () => {
      onSocket?.delete(res);
      answered(res);
    });
  });
  openResponses.set(server, open);
  openSockets.set(server, sockets);
  return server;
}

export interface ServerOptions {
  /**
   * How long a request, headers and body, may take to arrive (REQUEST_TIMEOUT); past it the answer
   * is `408 request_timeout` and the connection is closed. Node's own 300 s let a tenant hold a
   * body of up to BODY_LIMIT in memory per connection for five minutes, sending a few bytes: a
   * compressed one is held as it inflates (docs/security.md).
   */
  requestTimeoutMs?: number;
}

const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
/** Node's own headersTimeout: a request's headers within a minute, or as long as the whole request may take. */
const HEADERS_TIMEOUT_MS = 60_000;

/** Each server's answers under way, for closeServer. */
const openResponses = new WeakMap<http.Server, Set<http.ServerResponse>>();
/** Each server's connections, with the answers under way on each. */
const openSockets = new WeakMap<http.Server, Map<Socket, Set<http.ServerResponse>>>();
/** Servers closeServer was called on. */
const draining = new WeakSet<http.Server>();
/** Draining servers whose requests' bodies had their time to arrive (DrainOptions.bodyGraceMs). */
const bodiesOverdue = new WeakSet<http.Server>();

/**
 * Once a draining server has no answer under way, the connections still open are those of requests
 * not yet read whole (a client that stalled in its headers) or not yet started: nothing is under
 * way on them, so cutting them loses no answer. Node stops enforcing headersTimeout once the server
 * is closed, so such a client otherwise held the drain until SHUTDOWN_TIMEOUT_MS ended the process
 * (exit 1). A connection ending after its answer (Connection: close) is left to end on its own.
 */
function cutUnansweredConnections(server: http.Server): void {
  for (const socket of openSockets.get(server)?.keys() ?? []) if (!socket.writableEnded) socket.destroy();
}

/**
 * Cuts the connections whose request's body is still arriving, once it has had its time. No route
 * that changes anything runs before its body is whole, so nothing of such a request was done (it
 * counted toward its tenant's rate limit, which comes first): the client sends it again, to another
 * replica. Node stops enforcing requestTimeout once the server is closed, so a client that stalled
 * (or crawled) in its body otherwise held the drain until SHUTDOWN_TIMEOUT_MS ended the process
 * (exit 1). A request pipelined behind an answer still under way is left until that answer ends
 * (cutting it then would lose that answer); the cut right after may still reset the connection
 * before the client has read that answer, as any cut may.
 */
function cutUnfinishedBodies(server: http.Server): void {
  for (const [socket, answers] of openSockets.get(server) ?? []) {
    const head = (socket as Socket & { _httpMessage?: http.ServerResponse | null })._httpMessage;
    for (const res of answers) {
      if (res.req.complete || res.headersSent || (head && head !== res)) continue;
      countAsCutByServer(res, '503'); // the service went away under it
      socket.destroy();
      break;
    }
  }
}

/** How many answers a server has under way (what closeServer would reach). */
export function answersUnderWay(server: http.Server): number {
  return openResponses.get(server)?.size ?? 0;
}

export interface DrainOptions {
  /** From the drain's start, how long requests whose bodies are still arriving may take to send the rest; then their connections are cut. */
  bodyGraceMs: number;
}

/**
 * Stops taking connections, closes the idle ones, and has every answer from now on close its own:
 * those under way, and those to requests that still come on connections already open. Node keeps a
 * busy keep-alive connection open past `close()` and answers it `keep-alive`, so a client that asked
 * again on it at once (waitForCompletion, after its wait was answered) kept the server from closing
 * until SHUTDOWN_TIMEOUT ended the process with its requests cut off.
 */
export function closeServer(server: http.Server, { bodyGraceMs }: DrainOptions): void {
  draining.add(server);
  const bodiesDue = setTimeout(() => {
    bodiesOverdue.add(server);
    cutUnfinishedBodies(server);
  }, bodyGraceMs).unref();
  server.once('close', () => clearTimeout(bodiesDue));
  server.close();
  server.closeIdleConnections();
  server.prependListener('request', (_req: http.IncomingMessage, res: http.ServerResponse) => res.setHeader('Connection', 'close'));
  for (const res of openResponses.get(server) ?? []) {
    if (!res.headersSent) res.setHeader('Connection', 'close');
    // An answer already on its way says keep-alive: its connection is idle once it ends.
    else res.once('close', () => server.closeIdleConnections());
  }
  if (answersUnderWay(server) === 0) cutUnansweredConnections(server);
}

interface MessageClasses {
  IncomingMessage: typeof http.IncomingMessage;
  ServerResponse: typeof http.ServerResponse;
}

const classesByApp = new WeakMap<Express, MessageClasses>();

/** Made once per app, so a second server for the same app shares them. */
function messageClassesOf(app: Express): MessageClasses {
  let classes = classesByApp.get(app);
  if (!classes) {
    const Request = subclassWith(http.IncomingMessage, app.request);
    const Response = subclassWith(http.ServerResponse, app.response);
    app.request = Request.prototype as Express['request'];
    app.response = Response.prototype as Express['response'];
    classes = { IncomingMessage: Request as typeof http.IncomingMessage, ServerResponse: Response as unknown as typeof http.ServerResponse };
    classesByApp.set(app, classes);
  }
  return classes;
}
