import { once } from 'node:events';
import http from 'node:http';
import { AddressInfo, connect, Socket } from 'node:net';

import express from 'express';

import { httpMetrics } from '../../src/http/httpMetrics';
import { answersUnderWay, closeServer, createServer } from '../../src/http/server';
import { Metrics } from '../../src/metrics';
import type { Db } from '../../src/store/db';

/** Runs `use` against a server, as rollcall serves its app, whose routes answer after `delayMs`; then closes it. */
async function withSlowServer(delayMs: number, use: (server: http.Server, port: number, handled: unknown[], metrics: Metrics) => Promise<void>): Promise<void> {
  const handled: unknown[] = [];
  const metrics = new Metrics({} as Db); // no pool: only the request series are read
  const app = express();
  app.use(httpMetrics(metrics));
  app.get('/slow', (_req, res) => void setTimeout(() => res.json({ ok: true }), delayMs));
  // Its headers go out at once (keep-alive, as an answer already on its way when a drain begins).
  app.get('/streamed', (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).flushHeaders();
    setTimeout(() => res.end('{"ok":true}'), delayMs);
  });
  app.post('/slow', express.json(), (req, res) => {
    handled.push(req.body as unknown);
    setTimeout(() => res.json({ ok: true }), delayMs);
  });
  const server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    await use(server, (server.address() as AddressInfo).port, handled, metrics);
  } finally {
    server.closeAllConnections();
    if (server.listening) server.close();
  }
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the HTTP server', () => {
  it('when a client pipelines two requests and goes before the first is answered, then neither answer stays counted as under way', () =>
    withSlowServer(200, async (server, port) => {
      const socket = connect(port, '127.0.0.1');
      await new Promise((resolve) => socket.once('connect', resolve));
      socket.write('GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /slow HTTP/1.1\r\nHost: x\r\n\r\n');
      await pause(50);
      expect(answersUnderWay(server)).toBe(2);
      socket.destroy();
      await pause(400);
      expect(answersUnderWay(server)).toBe(0);
    }));

  it('when a client pipelines a request with a body behind another and goes before the first is answered, then neither answer stays counted as under way', () =>
    withSlowServer(200, async (server, port) => {
      const socket = connect(port, '127.0.0.1');
      await new Promise((resolve) => socket.once('connect', resolve));
      const body = '{"a":1}';
      socket.write(
        `GET /slow HTTP/1.1\r\nHost: x\r\n\r\nPOST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      );
      await pause(50); // the second body has been read: its request has closed, its answer waits behind the first
      expect(answersUnderWay(server)).toBe(2);
      socket.destroy();
      await pause(400);
      expect(answersUnderWay(server)).toBe(0); // else a drain would never see none under way
    }));

  it('when a request’s body has been read and its answer is still to come, then that answer is still counted as under way', () =>
    withSlowServer(300, async (server, port) => {
      const answer = new Promise<number>((resolve) =>
        http
          .request({ port, path: '/slow', method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          })
          .end('{"ids":[]}'),
      );
      await pause(150); // the body is read, and the request has closed
      expect(answersUnderWay(server)).toBe(1);
      expect(await answer).toBe(200);
      await pause(50);
      expect(answersUnderWay(server)).toBe(0);
    }));

  it('when it is closed while an answer is under way on a kept-alive connection, then that answer closes its connection and the server closes', () =>
    withSlowServer(200, async (server, port) => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      try {
        const answer = new Promise<http.IncomingMessage>((resolve) => http.get({ port, path: '/slow', agent }, resolve));
        await pause(50);
        const closed = new Promise((resolve) => server.once('close', resolve));
        closeServer(server, { bodyGraceMs: 5_000 });
        const res = await answer;
        res.resume();
        expect(res.headers.connection).toBe('close');
        await closed; // without the close, the idle kept-alive connection held it for its 5 s keep-alive timeout
      } finally {
        agent.destroy();
      }
    }));

  describe('when it is closed while a request’s body is still arriving', () => {
    const partialPost = (body: string) =>
      `POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length + 10}\r\n\r\n${body}`;

    it('then that body gets its grace, its connection is cut after it (its request not run), and the server closes', () =>
      withSlowServer(100, async (server, port, handled, metrics) => {
        const socket = await connected(port);
        const read = once(server, 'request');
        socket.write(partialPost('{"a":'));
        const cut = once(socket, 'close');
        await read; // the headers are read: its answer is under way
        const closed = once(server, 'close');
        const drainStarted = performance.now();
        closeServer(server, { bodyGraceMs: 300 });
        await pause(150);
        expect(socket.destroyed).toBe(false); // within its grace the body may still come
        await cut;
        await closed; // without the cut, only SHUTDOWN_TIMEOUT_MS ended it
        expect(performance.now() - drainStarted).toBeGreaterThanOrEqual(290);
        expect(handled).toEqual([]);
        // The service cut it, not a client that left: counted as 503, not 499.
        expect(await statusesCounted(metrics)).toEqual({ 'POST /slow 503': 1 });
      }));

    it('then a body that arrives within its grace is answered', () =>
      withSlowServer(100, async (server, port, handled) => {
        const read = once(server, 'request');
        const answer = new Promise<number>((resolve, reject) => {
          const req = http.request({ port, path: '/slow', method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          });
          req.on('error', reject);
          req.write('{"a":');
          setTimeout(() => req.end('1}'), 150);
        });
        await read;
        closeServer(server, { bodyGraceMs: 1_000 });
        expect(await answer).toBe(200);
        expect(handled).toEqual([{ a: 1 }]);
      }));

    it('then a body pipelined behind an answer still under way is cut only once that answer has gone', () =>
      withSlowServer(400, async (server, port, handled) => {
        const socket = await connected(port);
        const received: Buffer[] = [];
        socket.on('data', (chunk: Buffer) => received.push(chunk));
        let requests = 0;
        const bothRead = new Promise<void>((resolve) => server.on('request', () => ++requests === 2 && resolve()));
        // The first answer is on its way (keep-alive) when the drain begins: only the cut ends the connection.
        socket.write(`GET /streamed HTTP/1.1\r\nHost: x\r\n\r\n${partialPost('{"a":')}`);
        const cut = once(socket, 'close');
        await bothRead;
        closeServer(server, { bodyGraceMs: 100 });
        await cut;
        const text = Buffer.concat(received).toString();
        expect(text).toMatch(/^HTTP\/1\.1 200 OK\r\n/); // the first answer came whole before the cut
        expect(text).toContain('{"ok":true}');
        expect(text.endsWith('0\r\n\r\n')).toBe(true); // its last chunk too
        expect(handled).toEqual([]);
      }));
  });
});

/** The requests counted so far, by method, route and status, once the last one closed. */
async function statusesCounted(metrics: Metrics): Promise<Record<string, number>> {
  await pause(20);
  const { values } = await metrics.httpRequests.get();
  return Object.fromEntries(values.map(({ labels, value }) => [`${labels.method} ${labels.route} ${labels.status}`, value]));
}

async function connected(port: number): Promise<Socket> {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  await once(socket, 'connect');
  return socket;
}
