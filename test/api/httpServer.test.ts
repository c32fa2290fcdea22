import http from 'node:http';
import { AddressInfo, connect } from 'node:net';

import express from 'express';

import { answersUnderWay, closeServer, createServer } from '../../src/http/server';

/** Runs `use` against a server, as rollcall serves its app, whose routes answer after `delayMs`; then closes it. */
async function withSlowServer(delayMs: number, use: (server: http.Server, port: number) => Promise<void>): Promise<void> {
  const app = express();
  app.get('/slow', (_req, res) => void setTimeout(() => res.json({ ok: true }), delayMs));
  app.post('/slow', express.json(), (_req, res) => void setTimeout(() => res.json({ ok: true }), delayMs));
  const server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    await use(server, (server.address() as AddressInfo).port);
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
        closeServer(server);
        const res = await answer;
        res.resume();
        expect(res.headers.connection).toBe('close');
        await closed; // without the close, the idle kept-alive connection held it for its 5 s keep-alive timeout
      } finally {
        agent.destroy();
      }
    }));
});
