import { once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import zlib from 'node:zlib';

import express from 'express';
import pino from 'pino';
import { Counter, Histogram, Registry } from 'prom-client';
import request from 'supertest';

import { errorHandler } from '../../src/http/errorHandler';
import { httpMetrics } from '../../src/http/httpMetrics';
import { createServer } from '../../src/http/server';
import type { Metrics } from '../../src/metrics';
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

  /**
   * Sends raw bytes to a server of the app and reads the whole answer, up to the connection's close;
   * with `after`, on a kept-alive connection once it has answered that request.
   */
  async function rawAnswer(bytes: string, after?: string): Promise<{ status: number; headers: string; body: string }> {
    const server = createServer(svc.rollcall.app).listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const socket = net.connect((server.address() as AddressInfo).port, '127.0.0.1');
      socket.on('error', () => undefined); // a reset after the answer is no matter here
      let text = '';
      socket.on('data', (chunk) => (text += String(chunk)));
      if (after !== undefined) {
        socket.write(after);
        const answered = () => /content-length: (\d+)\r\n[\s\S]*?\r\n\r\n/i.exec(text);
        while (!answered() || text.length < answered()!.index + answered()![0].length + Number(answered()![1])) await once(socket, 'data');
        expect(text).toMatch(/^HTTP\/1\.1 200 /);
        text = '';
      }
      socket.write(bytes);
      await once(socket, 'close');
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
    [
      'a chunk size that is not hex, in the body',
      400,
      'invalid_request',
      'POST /v1/acks HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n',
    ],
  ])("when Node's HTTP parser refuses a request (%s), then the answer is %i %s in the API's error shape", async (_what, status, code, bytes) => {
    const answer = await rawAnswer(bytes);
    expect(answer.status).toBe(status);
    expect(answer.headers).toContain('content-type: application/json');
    expect(JSON.parse(answer.body)).toEqual({ error: { code, message: expect.any(String) } });
  });

  it.each([
    ['headers past 16 KiB', 431, 'headers_too_large', `GET /v1/batches?userKey=${'a'.repeat(17_000)} HTTP/1.1\r\nHost: localhost\r\n\r\n`],
    ['a control byte in a header', 400, 'invalid_request', 'GET /v1/batches HTTP/1.1\r\nHost: localhost\r\nX-Bad: a\x01b\r\n\r\n'],
  ])(
    'when the parser refuses a request (%s) on a kept-alive connection that was answered before, then it is answered too (%i %s)',
    async (_what, status, code, bytes) => {
      const answer = await rawAnswer(bytes, 'GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n');
      expect(answer.status).toBe(status);
      expect(JSON.parse(answer.body)).toEqual({ error: { code, message: expect.any(String) } });
    },
  );

  it.each([
    ['/', 'Range', 'bytes=9999999-', 416, 'range_not_satisfiable'],
    ['/dashboard/app.js', 'Range', 'bytes=9999999-', 416, 'range_not_satisfiable'],
    ['/', 'If-Match', '"not-this-one"', 412, 'precondition_failed'],
    ['/dashboard/style.css', 'If-Unmodified-Since', 'Thu, 01 Jan 1970 00:00:00 GMT', 412, 'precondition_failed'],
  ])('when the dashboard %s is asked with %s: %s, which its file cannot meet, then %i %s in the error shape', async (path, header, value, status, code) => {
    const res = await svc.api.get(path).set(header, value);
    expect(res.status).toBe(status);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.headers.etag).toBeUndefined();
    expect(res.body).toEqual({ error: { code, message: expect.any(String) } });
    if (status === 416) expect(res.headers['content-range']).toMatch(/^bytes \*\/\d+$/);
    const page = await svc.api.get(path).set('Range', 'bytes=0-9');
    expect([page.status, page.headers['content-range']]).toEqual([206, expect.stringMatching(/^bytes 0-9\//)]); // a range it can serve is served
  });

  it('when a malformed request comes pipelined behind one still being answered, then no answer is written that the client would take for the first', async () => {
    const batch = await batchWith(svc.client, 1);
    const waiting = `GET /v1/batches/${batch.id}/wait?timeout=1 HTTP/1.1\r\nHost: localhost\r\n\r\n`;
    const answer = await rawAnswer(`${waiting}GET /v1/batches HTTP/1.1\r\nHost: localhost\r\nX-Bad: a\x01b\r\n\r\n`);
    expect(answer.status === 400 || answer.body.includes('invalid_request')).toBe(false);
  });

  it('when a query value is not valid percent-encoding (?userKey=%FF), then 400 invalid_request, not the batches of key U+FFFD', async () => {
    const replaced = await svc.api.post('/v1/batches').send({ userKey: '\uFFFD' });
    const spaced = await svc.api.post('/v1/batches').send({ userKey: 'a b' });
    for (const query of ['userKey=%FF', 'userKey=%C3', 'user%FFKey=x']) {
      const res = await svc.api.get(`/v1/batches?${query}`);
      expect([query, res.status, res.body.error?.code]).toEqual([query, 400, 'invalid_request']);
    }
    const ids = async (query: string) => (await svc.api.get(`/v1/batches?${query}`)).body.batches.map((batch: { id: string }) => batch.id);
    expect(await ids('userKey=%EF%BF%BD')).toEqual([replaced.body.id]); // the key itself, spelt right
    expect([await ids('userKey=a+b'), await ids('userKey=a%20b')]).toEqual([[spaced.body.id], [spaced.body.id]]);
  });

  it('when a query string holds more than 1,000 parameters, then 400 before any is decoded', async () => {
    const res = await svc.api.get(`/v1/batches?${'userKey=a&'.repeat(1001)}`);
    expect([res.status, res.body.error]).toEqual([400, { code: 'invalid_request', message: expect.stringContaining('at most 1000') }]);
    expect((await svc.api.get(`/v1/batches?${'limit=5&'.repeat(999)}`)).body.error.code).toBe('invalid_request'); // a list of limits, as before
  });

  it('when an HTTP/1.1 request has no Host, then 400 invalid_request in the error shape, with its request id', async () => {
    const answer = await rawAnswer('GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n');
    expect([answer.status, answer.headers]).toEqual([400, expect.stringContaining('x-request-id: ')]);
    expect(JSON.parse(answer.body)).toEqual({ error: { code: 'invalid_request', message: expect.stringContaining('Host') } });
  });

  it('when a request carries an expectation the server does not know (Expect: foo), then it is served as without one', async () => {
    const answer = await rawAnswer('GET /healthz HTTP/1.1\r\nHost: localhost\r\nExpect: foo\r\nConnection: close\r\n\r\n');
    expect([answer.status, answer.headers]).toEqual([200, expect.stringContaining('x-request-id: ')]);
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

describe('the error mapper', () => {
  it('when a route fails after its answer began, then the connection is cut and the failure is logged, not lost', async () => {
    const lines: string[] = [];
    const log = pino({ level: 'info' }, new Writable({ write: (chunk, _encoding, done) => (lines.push(String(chunk)), done()) }));
    const app = express();
    // The two series httpMetrics writes, on a registry of this test's own (Metrics itself needs a database).
    const registry = new Registry();
    const labelNames = ['method', 'route', 'status'];
    const httpRequests = new Counter({ name: 'rollcall_http_requests_total', help: 'requests', labelNames, registers: [registry] });
    const httpDuration = new Histogram({ name: 'rollcall_http_request_duration_seconds', help: 'latency', labelNames, registers: [registry] });
    app.use(httpMetrics({ httpRequests, httpDuration } as unknown as Metrics));
    app.use((req, _res, next) => {
      Object.defineProperty(req, 'log', { value: log });
      next();
    });
    app.get('/x', (_req, res, next) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('part of it', () => next(new Error('the file failed mid-read'))); // once the part is on its way
    });
    app.use(errorHandler());
    const server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const socket = net.connect((server.address() as AddressInfo).port, '127.0.0.1');
      socket.on('error', () => undefined);
      let text = '';
      socket.on('data', (chunk) => (text += String(chunk)));
      socket.write('GET /x HTTP/1.1\r\nHost: localhost\r\n\r\n');
      await once(socket, 'close');
      expect(text).toMatch(/^HTTP\/1\.1 200 /);
      expect(text).not.toMatch(/\r\n0\r\n\r\n$/); // no closing chunk: the client sees the answer cut short
      const logged = lines.map((line) => JSON.parse(line) as { msg: string; err?: { message: string } });
      expect(logged).toContainEqual(
        expect.objectContaining({ msg: 'request failed after its answer began', err: expect.objectContaining({ message: 'the file failed mid-read' }) }),
      );
      // Counted under the status its answer began with: the service cut it, the client did not leave.
      expect(await registry.metrics()).toContain('rollcall_http_requests_total{method="GET",route="/x",status="200"} 1');
    } finally {
      server.close();
    }
  });
});
