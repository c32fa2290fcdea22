import http from 'node:http';
import type { Socket } from 'node:net';

import type { Express } from 'express';

import { answerClientError } from './errorHandler';

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
export function createServer(app: Express): http.Server {
  const server = http.createServer(messageClassesOf(app), app).on('clientError', answerClientError);
  const open = new Set<http.ServerResponse>();
  const answered = (res: http.ServerResponse) => {
    open.delete(res);
    if (open.size === 0 && draining.has(server)) cutUnansweredConnections(server);
  };
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    open.add(res);
    res.once('close', () => answered(res));
    // A pipelined request's answer waits for the one before it; if the client goes first, that
    // answer never closes, while its request does. Not any request's close: one whose body was
    // read closes then, its answer still to come.
    req.once('close', () => {
      if (req.socket.destroyed) answered(res);
    });
  });
  const sockets = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  openResponses.set(server, open);
  openSockets.set(server, sockets);
  return server;
}

/** Each server's answers under way, for closeServer. */
const openResponses = new WeakMap<http.Server, Set<http.ServerResponse>>();
/** Each server's connections. */
const openSockets = new WeakMap<http.Server, Set<Socket>>();
/** Servers closeServer was called on. */
const draining = new WeakSet<http.Server>();

/**
 * Once a draining server has no answer under way, the connections still open are those of requests
 * not yet read whole (a client that stalled in its headers) or not yet started: nothing was answered
 * on them, so cutting them loses nothing a client was told, and Node's headersTimeout (a minute)
 * would otherwise keep the process past SHUTDOWN_TIMEOUT_MS. A connection ending after its answer
 * (Connection: close) is left to end on its own, its answer whole.
 */
function cutUnansweredConnections(server: http.Server): void {
  for (const socket of openSockets.get(server) ?? []) if (!socket.writableEnded) socket.destroy();
}

/** How many answers a server has under way (what closeServer would reach). */
export function answersUnderWay(server: http.Server): number {
  return openResponses.get(server)?.size ?? 0;
}

/**
 * Stops taking connections, closes the idle ones, and has every answer from now on close its own:
 * those under way, and those to requests that still come on connections already open. Node keeps a
 * busy keep-alive connection open past `close()` and answers it `keep-alive`, so a client that asked
 * again on it at once (waitForCompletion, after its wait was answered) kept the server from closing
 * until SHUTDOWN_TIMEOUT ended the process with its requests cut off.
 */
export function closeServer(server: http.Server): void {
  draining.add(server);
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
