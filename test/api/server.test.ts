import { once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import zlib from 'node:zlib';

import request from 'supertest';

import { createServer } from '../../src/http/server';
import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

describe.each(backends())('the HTTP server (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  /** Serves the requests through a server of the app, noting each request's and response's prototypes on arrival and when answered. */
  async function prototypesSeen(send: (api: ReturnType<typeof request>) => Promise<unknown>) {
    const { app } = svc.rollcall;
    const server = createServer(app);
    const seen: Array<{ arrived: [object, object]; answered?: [object, object] }> = [];
    server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
      const entry: (typeof seen)[number] = { arrived: [Object.getPrototypeOf(req), Object.getPrototypeOf(res)] };
      res.on('finish', () => (entry.answered = [Object.getPrototypeOf(req), Object.getPrototypeOf(res)]));
      seen.push(entry);
    });
    await send(request(server));
    return { seen, app };
  }

  /** Sends raw bytes to a server of the app and reads the whole answer, up to the connection's close. */
  async function rawAnswer(bytes: string): Promise<{ status: number; headers: string; body: string }> {
    const server = createServer(svc.rollcall.app).listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const socket = net.connect((server.address() as AddressInfo).port, '127.0.0.1');
      socket.on('error', () => undefined); // a reset after the answer is no matter here
      socket.write(bytes);
      let text = '';
      for await (const chunk of socket) text += String(chunk);
      const [head = '', body = ''] = text.split('\r\n\r\n');
      return { status: Number(head.split(' ')[1]), headers: head.toLowerCase(), body };
    } finally {
      server.close();
    }
  }

  it.each([
    ['headers past 16 KiB', 431, 'headers_too_large', `GET /v1/batches?userKey=${'a'.repeat(17_000)} HTTP/1.1\r\nHost: localhost\r\n\r\n`],
    ['a space in the path', 400, 'invalid_request', 'GET /v1/batches/a b HTTP/1.1\r\nHost: localhost\r\n\r\n'],
    [
      'Content-Length with chunked',
      400,
      'invalid_request',
      'POST /v1/acks HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}',
    ],
    ['a control byte in a header', 400, 'invalid_request', 'GET /v1/batches HTTP/1.1\r\nHost: localhost\r\nX-Bad: a\x01b\r\n\r\n'],
  ])("when Node's HTTP parser refuses a request (%s), then the answer is %i %s in the API's error shape", async (_what, status, code, bytes) => {
    const answer = await rawAnswer(bytes);
    expect(answer.status).toBe(status);
    expect(answer.headers).toContain('content-type: application/json');
    expect(JSON.parse(answer.body)).toEqual({ error: { code, message: expect.any(String) } });
  });

  it.each(['/v1/batches/%E0%A4%A', '/v1/items/%ZZ', '/v1/batches/%C0/failures'])(
    'when a path parameter is not valid percent-encoding (%s), then 400 invalid_request',
    async (path) => {
      const res = await svc.api.get(path);
      expect(res.status).toBe(400);
      expect(res.body.error).toEqual({ code: 'invalid_request', message: expect.stringContaining('decode') });
    },
  );

  it.each([
    ['gzip', Buffer.from('not gzip')],
    ['deflate', zlib.gzipSync('{}')],
    ['br', Buffer.from('{}')],
    ['gzip', zlib.gzipSync('{"userKey":"cut"}').subarray(0, 15)],
  ])('when a %s body does not decompress, then 400 invalid_request and nothing is made', async (encoding, body) => {
    const before = (await svc.api.get('/v1/batches')).body.batches.length as number;
    const res = await svc.api.post('/v1/batches').set('Content-Type', 'application/json').set('Content-Encoding', encoding).send(body);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await svc.api.get('/v1/batches')).body.batches).toHaveLength(before);
  });

  it('when requests arrive, then they and their responses already have the app prototypes', async () => {
    const batch = await batchWith(svc.client, 3);
    const { seen, app } = await prototypesSeen(async (api) => {
      expect((await api.post('/v1/acks').send({ ids: [batch.ids[0]] })).body.acked).toBe(1);
      expect((await api.get('/healthz')).status).toBe(200);
      expect((await api.get('/v1/nothing-here')).body.error.code).toBe('not_found');
    });
    expect(seen).toHaveLength(3);
    for (const entry of seen) {
      expect(entry.arrived).toEqual([app.request, app.response]);
      expect(entry.answered).toEqual([app.request, app.response]);
    }
  });

  it('when a second server serves the same app, then it answers alike, prototypes not wrapped again', async () => {
    const { app } = svc.rollcall;
    const before = [app.request, app.response];
    const res = await request(createServer(app)).get('/healthz').set('x-request-id', 'second-server');
    expect(res.status).toBe(200);
    expect(res.headers['x-request-id']).toBe('second-server');
    expect([app.request, app.response]).toEqual(before);
  });
});
