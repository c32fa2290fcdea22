import http from 'node:http';
import { AddressInfo } from 'node:net';

import { httpSend, RollcallClient } from '../src/client';

/**
 * A server that answers `{"n": <request number>}`, counts connections, and (when told) drops a kept-alive
 * connection as its second request arrives: what a server does when it closes an idle connection
 * just as the client reuses it.
 */
async function server(options: { dropSecondRequestOnAConnection?: boolean; answerAfterMs?: number } = {}) {
  const seen = { requests: 0, connections: 0 };
  const onConnection = new WeakMap<object, number>();
  const srv = http.createServer((req, res) => {
    const n = (onConnection.get(req.socket) ?? 0) + 1;
    onConnection.set(req.socket, n);
    seen.requests += 1;
    if (options.dropSecondRequestOnAConnection && n === 2) return req.socket.destroy();
    req.resume();
    const answer = () => res.setHeader('content-type', 'application/json').end(JSON.stringify({ n: seen.requests }));
    req.on('end', () => setTimeout(answer, options.answerAfterMs ?? 0).unref());
  });
  srv.on('connection', () => (seen.connections += 1));
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  const close = () => {
    srv.closeAllConnections();
    return new Promise<void>((resolve) => srv.close(() => resolve()));
  };
  return { url, seen, close };
}

describe("the client's default way of sending (httpSend)", () => {
  it('when requests follow one another, then they share one kept-alive connection', async () => {
    const srv = await server();
    try {
      const send = httpSend();
      for (let i = 1; i <= 3; i++) {
        const answer = await send(`${srv.url}/v1/batches`, { method: 'GET', headers: {} });
        expect({ ok: answer.ok, status: answer.status, body: JSON.parse(await answer.text()) }).toEqual({ ok: true, status: 200, body: { n: i } });
      }
      expect(srv.seen).toEqual({ requests: 3, connections: 1 });
    } finally {
      await srv.close();
    }
  });

  it('when the server drops a kept-alive connection as a GET reuses it, then the GET is sent again on a new one', async () => {
    const srv = await server({ dropSecondRequestOnAConnection: true });
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      expect(await client.list()).toEqual({ n: 1 });
      expect(await client.list()).toEqual({ n: 3 }); // the dropped request was the 2nd
      expect(srv.seen).toEqual({ requests: 3, connections: 2 });
    } finally {
      await srv.close();
    }
  });

  it('when the server drops a kept-alive connection as a POST reuses it, then the POST fails and is not sent twice', async () => {
    const srv = await server({ dropSecondRequestOnAConnection: true });
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      await client.open();
      await expect(client.open()).rejects.toMatchObject({ code: 'ECONNRESET' });
      expect(srv.seen).toEqual({ requests: 2, connections: 1 });
    } finally {
      await srv.close();
    }
  });

  it('when an answer takes longer than an idle connection is kept, then it still arrives (a long wait is not cut)', async () => {
    const srv = await server({ answerAfterMs: 4500 });
    try {
      const answer = await httpSend()(`${srv.url}/v1/batches/x/wait?timeout=5`, { method: 'GET', headers: {} });
      expect(JSON.parse(await answer.text())).toEqual({ n: 1 });
    } finally {
      await srv.close();
    }
  }, 15_000);

  it('when the server does not answer within the time limit, then the request fails with the abort', async () => {
    const srv = await server({ answerAfterMs: 10_000 });
    try {
      const client = new RollcallClient({ baseUrl: srv.url, timeoutMs: 100 });
      const started = Date.now();
      await expect(client.list()).rejects.toMatchObject({ name: 'AbortError' });
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      await srv.close();
    }
  });
});
