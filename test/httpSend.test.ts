import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { getEventListeners } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net, { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

import type { Channel } from 'amqplib';

import { httpSend, retryAfterMs, RollcallApiError, RollcallClient } from '../src/client';
import { retryDelayMs, withRetries } from '../src/client/retry';
import { AckCoalescer, AckCoalescingOptions } from '../src/integrations/ackCoalescer';
import { rollcallConsumer } from '../src/integrations/amqp';
import { rollcallProcessor } from '../src/integrations/bullmq';
import type { CancelCheckOptions } from '../src/integrations/cancelledBatches';
import { openBatch } from '../src/integrations/producer';
import { until } from './helpers/realTime';

interface ServerOptions {
  /** Drop a kept-alive connection as its second request arrives: a server closing an idle connection just as the client reuses it. */
  dropSecondRequestOnAConnection?: boolean;
  /** The same, but after sending the answer's status line and headers. */
  dropSecondAnswerOnAConnection?: boolean;
  answerAfterMs?: number;
  /** Answer every request with this status, a `location` and an HTML body, as a proxy would. */
  redirectTo?: { status: number; location: string };
  /**
   * Answer `status` for `ms` after the first request, with this `Retry-After` when one is given: by
   * default 429 with it (a rate limiter), 503 without it (a proxy whose upstream is away; the
   * service's own 503s carry `Retry-After: 1`).
   */
  busyFor?: { ms: number; retryAfter?: string; status?: number };
  /** Answer the first `count` requests with this status and error code (`Infinity`: all of them). */
  failFirst?: { count: number; status: number; code: string };
  /** Answer the first requests with these, one each, in order: a status, and a body (an error's when none). */
  answers?: Array<{ status: number; body?: unknown }>;
  /** The body of every other answer (default `{"n": <request number>}`). */
  body?: unknown;
}

/** A server that answers `{"n": <request number>}` (as a page of no batches; a delete 204), counting connections and keeping what the last request carried. */
/** An answer with what the client reads of a batch. */
const A_BATCH = { id: '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', state: 'open' };

async function server(options: ServerOptions = {}) {
  const seen = { requests: 0, connections: 0 };
  /** When each request that `busyFor` did not refuse came (Date.now()). */
  const pastBusy: number[] = [];
  const last = { method: '', headers: {} as http.IncomingHttpHeaders, body: '' };
  const onConnection = new WeakMap<object, number>();
  let firstAt: number | undefined;
  const srv = http.createServer((req, res) => {
    const n = (onConnection.get(req.socket) ?? 0) + 1;
    onConnection.set(req.socket, n);
    seen.requests += 1;
    const arrivedAt = Date.now();
    if (options.dropSecondRequestOnAConnection && n === 2) return req.socket.destroy();
    if (options.dropSecondAnswerOnAConnection && n === 2) {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' }).flushHeaders();
      return void setTimeout(() => req.socket.resetAndDestroy(), 20);
    }
    let body = '';
    req.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
    const answer = () => {
      Object.assign(last, { method: req.method, headers: req.headers, body });
      if (options.redirectTo)
        return res.writeHead(options.redirectTo.status, { location: options.redirectTo.location, 'content-type': 'text/html' }).end('<html>moved</html>');
      firstAt ??= Date.now();
      if (options.busyFor && Date.now() - firstAt < options.busyFor.ms) {
        const { retryAfter, status = retryAfter === undefined ? 503 : 429 } = options.busyFor;
        const code = status === 429 ? 'rate_limited' : 'unavailable';
        return res
          .writeHead(status, { 'content-type': 'application/json', ...(retryAfter === undefined ? {} : { 'retry-after': retryAfter }) })
          .end(JSON.stringify({ error: { code, message: 'not now' } }));
      }
      pastBusy.push(arrivedAt);
      const scripted = options.answers?.[seen.requests - 1];
      if (scripted)
        return res
          .writeHead(scripted.status, { 'content-type': 'application/json' })
          .end(JSON.stringify(scripted.body ?? { error: { code: 'unavailable', message: 'not now' } }));
      if (options.failFirst && seen.requests <= options.failFirst.count)
        return res
          .writeHead(options.failFirst.status, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { code: options.failFirst.code, message: 'not now' } }));
      if (req.method === 'DELETE' && !options.body) return res.writeHead(204).end();
      res.setHeader('content-type', 'application/json').end(JSON.stringify(options.body ?? { n: seen.requests, batches: [], nextCursor: null }));
    };
    req.on('end', () => setTimeout(answer, options.answerAfterMs ?? 0).unref());
  });
  srv.on('connection', () => (seen.connections += 1));
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  const close = () => {
    srv.closeAllConnections();
    return new Promise<void>((resolve) => srv.close(() => resolve()));
  };
  return { url, seen, last, pastBusy, close };
}

/**
 * A port whose connections never open: a listener with a backlog of 0 that accepts nothing, its one
 * queue place taken (Node's own servers always accept, hence python).
 */
async function unopenablePort(): Promise<{ port: number; close(): void }> {
  const child: ChildProcess = spawn('python3', [
    '-c',
    'import socket,time\ns=socket.socket();s.bind(("127.0.0.1",0));s.listen(0);print(s.getsockname()[1],flush=True);time.sleep(60)',
  ]);
  const port = await new Promise<number>((resolve) => readline.createInterface({ input: child.stdout! }).once('line', (line) => resolve(Number(line))));
  const filler = net.connect(port, '127.0.0.1');
  await new Promise((resolve) => filler.once('connect', resolve));
  return {
    port,
    close: () => {
      filler.destroy();
      child.kill();
    },
  };
}

describe("the client's default way of sending (httpSend)", () => {
  it('when requests follow one another, from one client or several, then they share one kept-alive connection', async () => {
    const srv = await server();
    try {
      for (let i = 1; i <= 3; i++) {
        const answer = await httpSend()(`${srv.url}/v1/batches`, { method: 'GET', headers: {} });
        expect({ ok: answer.ok, status: answer.status, body: JSON.parse(await answer.text()) }).toMatchObject({ ok: true, status: 200, body: { n: i } });
      }
      expect(await new RollcallClient({ baseUrl: srv.url }).list()).toMatchObject({ n: 4 });
      expect(srv.seen).toEqual({ requests: 4, connections: 1 });
    } finally {
      await srv.close();
    }
  });

  it('when the server drops a kept-alive connection as a GET reuses it, then the GET is sent again on a new one', async () => {
    const srv = await server({ dropSecondRequestOnAConnection: true });
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      expect(await client.list()).toMatchObject({ n: 1 });
      expect(await client.list()).toMatchObject({ n: 3 }); // the dropped request was the 2nd
      expect(srv.seen).toEqual({ requests: 3, connections: 2 });
    } finally {
      await srv.close();
    }
  });

  it('when a kept-alive connection drops after the answer began, then a GET fails and is not sent twice (the server may have acted)', async () => {
    const srv = await server({ dropSecondAnswerOnAConnection: true });
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      await client.list();
      await expect(client.list()).rejects.toMatchObject({ code: 'ECONNRESET' });
      expect(srv.seen).toEqual({ requests: 2, connections: 1 });
    } finally {
      await srv.close();
    }
  });

  it('when the server drops a kept-alive connection as a POST reuses it, then the POST fails and is not sent twice', async () => {
    const srv = await server({ dropSecondRequestOnAConnection: true, body: A_BATCH });
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      await client.open();
      await expect(client.open()).rejects.toMatchObject({ code: 'ECONNRESET' });
      expect(srv.seen).toEqual({ requests: 2, connections: 1 });
    } finally {
      await srv.close();
    }
  });

  it('when the server drops a kept-alive connection as a DELETE reuses it, then the DELETE fails and is not sent twice (a second one would answer 404)', async () => {
    const srv = await server({ dropSecondRequestOnAConnection: true });
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      await client.list();
      await expect(client.delete('0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b')).rejects.toMatchObject({ code: 'ECONNRESET' });
      expect(srv.seen).toEqual({ requests: 2, connections: 1 });
    } finally {
      await srv.close();
    }
  });

  it('when batch IDs carry path characters, then each is sent as one segment and reaches no other route', async () => {
    const srv = await server({ body: A_BATCH });
    try {
      const paths: string[] = [];
      const spy = new RollcallClient({
        baseUrl: srv.url,
        fetch: (url, request) => {
          paths.push(new URL(url).pathname + new URL(url).search);
          return httpSend()(url, request);
        },
      });
      await spy.cancel('../admin/sweep?');
      await spy.status('?limit=1');
      expect(paths).toEqual(['/v1/batches/..%2Fadmin%2Fsweep%3F/cancel', '/v1/batches/%3Flimit%3D1']);
    } finally {
      await srv.close();
    }
  });

  it('when a 2xx answer is not JSON (a login page), then the client throws RollcallApiError invalid_response', async () => {
    const client = new RollcallClient({
      baseUrl: 'http://127.0.0.1:9',
      fetch: async () => ({ ok: true, status: 200, text: async () => '<html>sign in</html>' }),
    });
    await expect(client.list()).rejects.toMatchObject({ name: 'RollcallApiError', status: 200, code: 'invalid_response' });
  });

  it.each([
    ['an empty body', ''],
    ['JSON null', 'null'],
    ['a JSON string', '"ok"'],
  ])('when a 2xx answer is %s (a proxy, a wrong baseUrl), then it is not taken for an answer: invalid_response', async (_what, text) => {
    const client = new RollcallClient({ baseUrl: 'http://127.0.0.1:9', fetch: async () => ({ ok: true, status: 200, text: async () => text }) });
    await expect(client.seal('0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b')).rejects.toMatchObject({ status: 200, code: 'invalid_response' });
    await expect(client.ack(['a:b:0'])).rejects.toMatchObject({ status: 200, code: 'invalid_response' });
  });

  it("when an open or an add is answered with a JSON object that is not rollcall's (a wrong baseUrl answering {}), then it is invalid_response and openBatch goes no further", async () => {
    const paths: string[] = [];
    const answering = (answers: Record<string, unknown>) =>
      new RollcallClient({
        baseUrl: 'http://127.0.0.1:9',
        fetch: async (url) => {
          const path = new URL(url).pathname;
          paths.push(path);
          return { ok: true, status: 200, text: async () => JSON.stringify(answers[path] ?? {}) };
        },
      });
    const enqueue = jest.fn();
    await expect(openBatch(answering({}), { count: 3, enqueue })).rejects.toMatchObject({ status: 200, code: 'invalid_response' });
    expect(paths).toEqual(['/v1/batches']); // never on to /v1/batches/undefined/items

    // An add whose groups do not hold the items asked for: no item ID is made of it.
    const batchPath = `/v1/batches/${A_BATCH.id}/items`;
    const short = answering({ '/v1/batches': A_BATCH, [batchPath]: { batchId: A_BATCH.id, total: 2, groups: [{ id: 'g', size: 2 }] } });
    await expect(openBatch(short, { count: 3, enqueue })).rejects.toMatchObject({ code: 'add_failed', cause: { code: 'invalid_response' } });
    expect(enqueue).not.toHaveBeenCalled();
  });

  it("when an ack is answered 200 with an ack result that does not count each ID sent (something else's empty result), then it is invalid_response, and no ID is taken for recorded", async () => {
    const answering = (answer: Record<string, unknown>) =>
      new RollcallClient({ baseUrl: 'http://127.0.0.1:9', fetch: async () => ({ ok: true, status: 200, text: async () => JSON.stringify(answer) }) });
    const empty = { acked: 0, duplicates: 0, rejected: [], completed: [] };
    await expect(answering(empty).ack(['a:b:0', 'a:b:1'])).rejects.toMatchObject({ status: 200, code: 'invalid_response' });
    await expect(answering({ ...empty, acked: 3 }).ack(['a:b:0', 'a:b:1'])).rejects.toMatchObject({ status: 200, code: 'invalid_response' });
    const coalescer = new AckCoalescer(answering(empty));
    await expect(coalescer.ack('a:b:0', 'succeeded')).rejects.toMatchObject({ code: 'invalid_response' }); // a job it would have finished
    expect(await answering({ ...empty, acked: 1, duplicates: 1 }).ack(['a:b:0', 'a:b:1'])).toMatchObject({ acked: 1, duplicates: 1 });
  });

  it("when a delete, a listing, an item or a failure page is answered 200 with a JSON object that is not rollcall's (a wrong baseUrl answering {}), then it is invalid_response, not a delete reported done or a page without batches", async () => {
    const client = new RollcallClient({ baseUrl: 'http://127.0.0.1:9', fetch: async () => ({ ok: true, status: 200, text: async () => '{"deleted":true}' }) });
    const invalid = { status: 200, code: 'invalid_response' };
    await expect(client.delete(A_BATCH.id)).rejects.toMatchObject(invalid);
    await expect(client.list()).rejects.toMatchObject(invalid);
    await expect(client.item(`${A_BATCH.id}:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:0`)).rejects.toMatchObject(invalid);
    await expect(client.failures(A_BATCH.id)).rejects.toMatchObject(invalid);
  });

  it.each([0, -1, NaN])(
    'when a client is made with timeoutMs %s, then it is refused at once, not a client whose every request is cut before it is sent',
    (timeoutMs) => {
      expect(() => new RollcallClient({ baseUrl: 'http://127.0.0.1:9', timeoutMs })).toThrow(RangeError);
    },
  );

  it('when a call other than a delete is answered 204 (a proxy, a wrong baseUrl), then it fails as invalid_response and an ack is not sent again', async () => {
    let sent = 0;
    const client = new RollcallClient({
      baseUrl: 'http://127.0.0.1:9',
      fetch: async () => (sent++, { ok: true, status: 204, text: async () => '' }),
    });
    await expect(client.seal('0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b')).rejects.toMatchObject({ status: 204, code: 'invalid_response' });
    await expect(client.item('0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:0')).rejects.toMatchObject({
      code: 'invalid_response',
    });
    sent = 0;
    await expect(new AckCoalescer(client, { retry: { attempts: 5, firstDelayMs: 1 } }).ack('b:g:0', 'succeeded')).rejects.toMatchObject({
      code: 'invalid_response',
    });
    expect(sent).toBe(1);
    await expect(client.delete('0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b')).resolves.toBeUndefined(); // a delete's own answer
  });

  it('when a proxy answers 408 (it gave up waiting for the request), then the integrations send it again', async () => {
    let tries = 0;
    const client = new RollcallClient({
      baseUrl: 'http://127.0.0.1:9',
      fetch: async () =>
        ++tries === 1
          ? { ok: false, status: 408, text: async () => '<html>Request Timeout</html>' }
          : { ok: true, status: 200, text: async () => JSON.stringify({ batches: [], nextCursor: null }) },
    });
    await expect(withRetries(() => client.list(), { attempts: 3, firstDelayMs: 1 })).resolves.toEqual({ batches: [], nextCursor: null });
    expect(tries).toBe(2);
  });

  it("when the service's certificate is not trusted (self-signed), then the integrations do not send again: one handshake, the TLS error", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-tls-'));
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-days',
        '2',
        '-subj',
        '/CN=localhost',
        '-keyout',
        path.join(dir, 'key.pem'),
        '-out',
        path.join(dir, 'cert.pem'),
      ],
      { stdio: 'ignore' },
    );
    const srv = https.createServer({ key: fs.readFileSync(path.join(dir, 'key.pem')), cert: fs.readFileSync(path.join(dir, 'cert.pem')) }, (_req, res) =>
      res.end('{}'),
    );
    let handshakes = 0;
    srv.on('tlsClientError', () => (handshakes += 1));
    await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
    try {
      const client = new RollcallClient({ baseUrl: `https://localhost:${(srv.address() as AddressInfo).port}` });
      await expect(withRetries(() => client.list(), { attempts: 5, firstDelayMs: 1 })).rejects.toMatchObject({ code: 'DEPTH_ZERO_SELF_SIGNED_CERT' });
      await until(() => handshakes > 0);
      expect(handshakes).toBe(1);
    } finally {
      srv.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('when an ack is answered 200 with an object that is no ack result (a wrong baseUrl answering {}), then it fails as invalid_response, sent once', async () => {
    const odd = await server({ body: {} });
    try {
      await expect(new AckCoalescer(new RollcallClient({ baseUrl: odd.url })).ack('b:g:0', 'succeeded')).rejects.toMatchObject({ code: 'invalid_response' });
      expect(odd.seen.requests).toBe(1);
    } finally {
      await odd.close();
    }
  });

  it('when an integration is given a retry policy of attempts only, then the default backoff fills in the rest', async () => {
    const busy = await server({ busyFor: { ms: 60_000, retryAfter: '0' } });
    try {
      const acks = new AckCoalescer(new RollcallClient({ baseUrl: busy.url }), { retry: { attempts: 3 } });
      const started = Date.now();
      await expect(acks.ack('b:g:0', 'succeeded')).rejects.toMatchObject({ status: 429 });
      expect(busy.seen.requests).toBe(3);
      expect(Date.now() - started).toBeGreaterThanOrEqual(140); // 50 ms, then 100 ms between the tries
    } finally {
      await busy.close();
    }
  });

  it('when a retry policy sets attempts to undefined, then the tries end when retryForMs is spent; a value no option means is refused when the processor or consumer is made', async () => {
    let tries = 0;
    const refused = () => {
      tries += 1;
      return Promise.reject(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }));
    };
    const acks = new AckCoalescer(new RollcallClient({ baseUrl: 'http://127.0.0.1:1', fetch: refused }), {
      retry: { attempts: undefined, firstDelayMs: 10 },
      retryForMs: 1000,
    });
    const started = Date.now();
    await expect(acks.ack('b:g:0', 'succeeded')).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    // Sent at 0, 10, 30, 70, 150, 310 and 630 ms (up to half as late again each: the jitter), and a
    // last time at 1 s: the next wait, 640–960 ms, is cut there (7 tries when a loaded machine's
    // timers ran late past 1 s). Not 20 tries, 29–44 s.
    expect({ tries: Math.min(Math.max(tries, 7), 8), withinRetryFor: Date.now() - started < 1500 }).toEqual({ tries, withinRetryFor: true });
    const client = new RollcallClient({ baseUrl: 'http://127.0.0.1:1', fetch: refused });
    const meaningless: Array<AckCoalescingOptions & CancelCheckOptions> = [
      { retry: { attempts: NaN } },
      { retry: { attempts: 0 } },
      { retry: { attempts: 2.5 } },
      { retry: { attempts: '3' as unknown as number } },
      { retry: { firstDelayMs: -1 } },
      { retry: { firstDelayMs: NaN } },
      { retryForMs: NaN },
      { retryForMs: -1 },
      { retryForMs: '600000' as unknown as number },
      { maxDelayMs: NaN },
      { maxDelayMs: -1 },
      { maxDelayMs: Infinity },
      { maxIdsPerCall: NaN },
      { maxIdsPerCall: 0 },
      { maxIdsPerCall: 2.5 },
      { cancelCheckIntervalMs: NaN },
      { cancelCheckIntervalMs: -1 },
    ];
    for (const options of meaningless) {
      expect(() => rollcallProcessor(client, async () => 'ok', options)).toThrow(RangeError);
      expect(() => rollcallConsumer(client, {} as unknown as Channel, async () => undefined, options)).toThrow(RangeError);
    }
    // An unset environment variable's Number(undefined): not "every first failure is the last".
    for (const maxDeliveries of [NaN, -1, 1.5])
      expect(() => rollcallConsumer(client, {} as unknown as Channel, async () => undefined, { maxDeliveries })).toThrow(RangeError);
    // A JavaScript caller's `retry: null` is the default policy, as before; no time limit is one too.
    expect(() => rollcallProcessor(client, async () => 'ok', { retry: null as unknown as undefined, retryForMs: Infinity })).not.toThrow();
    expect(() => rollcallConsumer(client, {} as unknown as Channel, async () => undefined, { maxDeliveries: 0, maxIdsPerCall: 20_000 })).not.toThrow();
    expect(() =>
      rollcallConsumer(client, {} as unknown as Channel, async () => undefined, {
        maxDeliveries: Infinity,
        maxIdsPerCall: Infinity,
        cancelCheckIntervalMs: Infinity,
      }),
    ).not.toThrow();
  });

  it('when acks are held a while because rollcall cannot be reached, then a process warning says so (ack_delayed), once a minute however many calls', async () => {
    const warned = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const refused = () => Promise.reject(Object.assign(new Error('connect ECONNREFUSED http://user:secret@127.0.0.1:1'), { code: 'ECONNREFUSED' }));
      const acks = new AckCoalescer(new RollcallClient({ baseUrl: 'http://127.0.0.1:1', fetch: refused }), { retry: { firstDelayMs: 20 }, retryForMs: 1000 });
      const held = await Promise.allSettled([acks.ack('b:g:0', 'succeeded'), acks.ack('b:g:1', 'failed', 'one'), acks.ack('b:g:2', 'failed', 'two')]);
      expect(held.map((ack) => ack.status === 'rejected' && (ack.reason as { code?: string }).code)).toEqual(['ECONNREFUSED', 'ECONNREFUSED', 'ECONNREFUSED']);
      // Three calls (one per outcome and reason), each held past half its 1 s: one warning, with no password.
      const warnings = warned.mock.calls.map(([warning, options]) =>
        typeof warning === 'string' ? [(options as { code?: string }).code, warning] : [(warning as { code?: string }).code, warning.message],
      );
      expect(warnings).toEqual([
        [
          'ack_delayed',
          expect.stringMatching(
            /^rollcall has not taken acks for \d+ ms; they are sent again for up to 1 s \(retryForMs\), their jobs held\. The last error: connect ECONNREFUSED http:\/\/…@127\.0\.0\.1:1$/,
          ),
        ],
      ]);
      // A blip is not warned of: a call taken on its second try, 50 ms after its first.
      warned.mockClear();
      let calls = 0;
      const blip = () =>
        ++calls === 1 ? refused() : Promise.resolve(new Response(JSON.stringify({ acked: 1, duplicates: 0, rejected: [], completed: [] }), { status: 200 }));
      expect(await new AckCoalescer(new RollcallClient({ baseUrl: 'http://127.0.0.1:1', fetch: blip })).ack('b:g:0', 'succeeded')).toBeNull();
      expect(warned).not.toHaveBeenCalled();
    } finally {
      warned.mockRestore();
    }
  });

  it('when baseUrl holds a user name and password that fetch refuses, then the ack fails at once, not held for retryForMs', async () => {
    const acks = new AckCoalescer(new RollcallClient({ baseUrl: 'http://user:secret@127.0.0.1:1', fetch: globalThis.fetch }));
    const started = Date.now();
    await expect(acks.ack('b:g:0', 'succeeded')).rejects.toThrow(/includes credentials/);
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it('when the service answers 429 with Retry-After, then the error says how long, and the integrations wait that long before sending again', async () => {
    const limited = await server({ busyFor: { ms: 60_000, retryAfter: '7' } });
    const busy = await server({ busyFor: { ms: 1900, retryAfter: '1' }, body: { acked: 1, duplicates: 0, rejected: [], completed: [] } });
    try {
      await expect(new RollcallClient({ baseUrl: limited.url }).list()).rejects.toMatchObject({ status: 429, code: 'rate_limited', retryAfterMs: 7000 });
      const acks = new AckCoalescer(new RollcallClient({ baseUrl: busy.url }));
      expect(await acks.ack('b:g:0', 'succeeded')).toBeNull();
      // Sent at 0 s and 1–1.5 s (both refused, each asking for a second, lengthened at random by up
      // to half), then taken at 2–3 s: not the seven tries of the backoff alone (50 ms, 100 ms, …
      // apart) within the busy 1.9 s (room for a second try's timer 400 ms late).
      expect(busy.seen.requests).toBe(3);
    } finally {
      await limited.close();
      await busy.close();
    }
  });

  it.each([
    ['away behind a proxy (503 without Retry-After: the backoff alone)', undefined, 3500],
    ["busy (503 with Retry-After: 1, the service's answer while its ack queue is full or its database away)", '1', 1200],
  ])('when many workers are held while the service is %s, then their acks come back spread out, not all at the same moment', async (_what, retryAfter, ms) => {
    const busy = await server({ busyFor: { ms, retryAfter, status: 503 }, body: { acked: 1, duplicates: 0, rejected: [], completed: [] } });
    try {
      // Twenty workers (clients of their own, in one process here), whose acks met the outage together.
      const workers = Array.from({ length: 20 }, () => new AckCoalescer(new RollcallClient({ baseUrl: busy.url })));
      expect(await Promise.all(workers.map((acks, i) => acks.ack(`b:g:${i}`, 'succeeded')))).toEqual(Array(20).fill(null));
      // When the calls that were let through came: spread over 120 ms or more. Without jitter they
      // came back together at every try, all twenty within 7–36 ms. A spell long enough for the
      // pauses to reach their cap (2 s) gives the jitter room: a stalled event loop can bunch the
      // arrivals that fall within the stall, not the whole spread.
      expect(busy.pastBusy).toHaveLength(20);
      expect(Math.max(...busy.pastBusy) - Math.min(...busy.pastBusy)).toBeGreaterThanOrEqual(120);
    } finally {
      await busy.close();
    }
  });

  it('when a pause between tries is drawn, then it lies between the backoff (or the asked Retry-After) and half again as much', () => {
    const random = jest.spyOn(Math, 'random');
    try {
      const policy = { attempts: 20, firstDelayMs: 50 };
      const busy = new RollcallApiError(503, 'unavailable', 'not now', 1000);
      const pauses = [0, 0.999999].map((drawn) => {
        random.mockReturnValue(drawn);
        return [retryDelayMs(policy, 1, new Error('refused')), retryDelayMs(policy, 12, new Error('refused')), retryDelayMs(policy, 1, busy)].map(Math.round);
      });
      expect(pauses).toEqual([
        [50, 2000, 1000],
        [75, 3000, 1500],
      ]);
    } finally {
      random.mockRestore();
    }
  });

  it('when Retry-After is an HTTP date, or unreadable, then it is read as such', () => {
    const now = Date.parse('2026-11-24T06:00:00Z');
    expect(retryAfterMs('Tue, 24 Nov 2026 06:00:30 GMT', now)).toBe(30_000);
    expect(retryAfterMs('Tue, 24 Nov 2026 05:00:00 GMT', now)).toBe(0);
    expect(retryAfterMs(' 12 ', now)).toBe(12_000);
    expect(retryAfterMs('soon', now)).toBeUndefined();
    // Not what Date.parse makes of them (days in 2001: "retry now").
    expect(retryAfterMs('1.5', now)).toBeUndefined();
    expect(retryAfterMs('0.5', now)).toBeUndefined();
    // A proxy's header and the service's, joined: the first.
    expect(retryAfterMs('7, 1', now)).toBe(7_000);
    expect(retryAfterMs('Tuesday, 24-Nov-26 06:00:30 GMT', now)).toBe(30_000);
    expect(retryAfterMs('Tue Nov 24 06:00:30 2026', now)).toBe(30_000);
    // The shape of a date, but none: unreadable, not NaN (a timer of NaN fires at once).
    expect(retryAfterMs('Mon, 32 Jan 2025 08:49:37 GMT', now)).toBeUndefined();
    expect(retryAfterMs(null, now)).toBeUndefined();
  });

  it('when an answer takes longer than an idle connection is kept, then it still arrives (a long wait is not cut)', async () => {
    const srv = await server({ answerAfterMs: 4500 });
    try {
      const answer = await httpSend()(`${srv.url}/v1/batches/x/wait?timeout=5`, { method: 'GET', headers: {} });
      expect(JSON.parse(await answer.text())).toMatchObject({ n: 1 });
    } finally {
      await srv.close();
    }
  }, 15_000);

  it('when the server does not answer within the time limit, then the request fails with the abort, even through a fetch that ignores signals', async () => {
    const srv = await server({ answerAfterMs: 10_000 });
    try {
      const client = new RollcallClient({ baseUrl: srv.url, timeoutMs: 100 });
      const started = Date.now();
      await expect(client.list()).rejects.toMatchObject({ name: 'AbortError' });
      expect(Date.now() - started).toBeLessThan(5000);

      // A fetch of the caller's that does not pass the signal on: the time limit still ends the call
      // (an ack sent so to a service that never answers held its jobs until the answer came).
      const send = httpSend();
      const deaf = new RollcallClient({ baseUrl: srv.url, timeoutMs: 100, fetch: (url, request) => send(url, { ...request, signal: undefined }) });
      const deafStarted = Date.now();
      await expect(deaf.ack(['x:y:0'])).rejects.toMatchObject({ name: 'AbortError', cause: { name: 'TimeoutError' } });
      expect(Date.now() - deafStarted).toBeLessThan(2000);
      // The same with a caller's signal that does not abort: the limit (here 100 ms plus the /wait's 0.3 s) ends the wait.
      const waitStarted = Date.now();
      await expect(deaf.waitForCompletion(A_BATCH.id, { timeoutMs: 300, signal: new AbortController().signal })).rejects.toMatchObject({ name: 'AbortError' });
      expect(Date.now() - waitStarted).toBeLessThan(2000);
    } finally {
      await srv.close();
    }
  });

  it('when waitForCompletion waits longer than one /wait may (60 s) and the service never answers, then it fails after ~60 s, not at the end of the whole wait', async () => {
    const srv = await server({ answerAfterMs: 200_000 });
    try {
      const client = new RollcallClient({ baseUrl: srv.url, timeoutMs: 500 });
      const started = Date.now();
      await expect(client.waitForCompletion('0190a0e0-0000-7000-8000-000000000000', { timeoutMs: 120_000 })).rejects.toMatchObject({ name: 'AbortError' });
      // The request's limit is the client's timeoutMs plus the /wait's own 60 s: not sooner, not later.
      expect(Date.now() - started).toBeGreaterThanOrEqual(60_000);
      expect(Date.now() - started).toBeLessThan(75_000);
    } finally {
      await srv.close();
    }
  }, 100_000);

  it('when a wait is answered 503 or 502 (a restart, a proxy), then waitForCompletion asks again and returns the batch; a good answer starts the count again', async () => {
    const sealed = { status: 200, body: { ...A_BATCH, state: 'sealed' } };
    const srv = await server({
      answers: [{ status: 503 }, { status: 502 }, sealed, { status: 503 }, { status: 502 }],
      body: { ...A_BATCH, state: 'complete' },
    });
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      // Four failures in all, but never three in a row: the wait goes on.
      const done = await client.waitForCompletion(A_BATCH.id, { timeoutMs: 10_000, retry: { attempts: 3, firstDelayMs: 10 } });
      expect(done.state).toBe('complete');
      expect(srv.seen.requests).toBe(6);
    } finally {
      await srv.close();
    }
  });

  it('when a wait is answered with an error a retry cannot change (404), then waitForCompletion throws it at once, asked once', async () => {
    const srv = await server({ failFirst: { count: Infinity, status: 404, code: 'batch_not_found' } });
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      await expect(client.waitForCompletion(A_BATCH.id, { timeoutMs: 10_000 })).rejects.toMatchObject({ status: 404, code: 'batch_not_found' });
      expect(srv.seen.requests).toBe(1);
    } finally {
      await srv.close();
    }
  });

  it('when the service stays unavailable, then waitForCompletion throws the last 503 once its tries are spent, or once its time is up, whichever comes first', async () => {
    const srv = await server({ failFirst: { count: Infinity, status: 503, code: 'database_unavailable' } });
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      await expect(client.waitForCompletion(A_BATCH.id, { timeoutMs: 60_000, retry: { attempts: 4, firstDelayMs: 10 } })).rejects.toMatchObject({
        status: 503,
      });
      expect(srv.seen.requests).toBe(4);
      srv.seen.requests = 0;
      const started = Date.now();
      // The default tries (20, 29–44 s) outlast a 700 ms wait: the time limit ends it, a last time asked at the deadline.
      await expect(client.waitForCompletion(A_BATCH.id, { timeoutMs: 700 })).rejects.toMatchObject({ status: 503 });
      expect(Date.now() - started).toBeGreaterThanOrEqual(700);
      expect(Date.now() - started).toBeLessThan(3000);
      expect(srv.seen.requests).toBeGreaterThan(2);
      await expect(client.waitForCompletion(A_BATCH.id, { retry: { attempts: 0 } })).rejects.toThrow(RangeError);
    } finally {
      await srv.close();
    }
  });

  it("when a wait's signal aborts, then it ends at once with the signal's reason: mid-request, in a pause between tries, through a fetch that ignores signals, or before it starts (nothing sent)", async () => {
    const slow = await server({ answerAfterMs: 10_000 });
    const down = await server({ failFirst: { count: Infinity, status: 503, code: 'unavailable' } });
    const abortedWithin = async (wait: (signal: AbortSignal) => Promise<unknown>, afterMs: number) => {
      const stop = new AbortController();
      const reason = new Error('the caller went away');
      const started = Date.now();
      setTimeout(() => stop.abort(reason), afterMs);
      await expect(wait(stop.signal)).rejects.toBe(reason);
      return Date.now() - started;
    };
    try {
      const slowClient = new RollcallClient({ baseUrl: slow.url });
      expect(await abortedWithin((signal) => slowClient.waitForCompletion(A_BATCH.id, { timeoutMs: 30_000, signal }), 200)).toBeLessThan(2000);
      expect(slow.seen.requests).toBe(1);

      // The first 503 is followed by a pause of 2 s (the backoff's cap): the abort ends the pause, and nothing is sent after it.
      const downClient = new RollcallClient({ baseUrl: down.url });
      const waited = await abortedWithin(
        (signal) => downClient.waitForCompletion(A_BATCH.id, { timeoutMs: 30_000, retry: { firstDelayMs: 5000 }, signal }),
        300,
      );
      expect(waited).toBeLessThan(1500);
      expect(down.seen.requests).toBe(1);

      // A fetch of the caller's that does not pass the signal on: the wait still ends at the abort.
      const send = httpSend();
      const deaf = new RollcallClient({ baseUrl: slow.url, fetch: (url, request) => send(url, { ...request, signal: undefined }) });
      expect(await abortedWithin((signal) => deaf.waitForCompletion(A_BATCH.id, { timeoutMs: 30_000, signal }), 200)).toBeLessThan(2000);

      await expect(downClient.waitForCompletion(A_BATCH.id, { signal: AbortSignal.abort('gone') })).rejects.toBe('gone');
      expect(down.seen.requests).toBe(1);
    } finally {
      await Promise.all([slow.close(), down.close()]);
    }
  });

  // A guard on the client's own listeners (linkedSignal, unlessAborted, pause): AbortSignal.any, used
  // before, holds its links by WeakRef, which no listener count shows.
  it('when one signal serves many waits, then none leaves a listener on it', async () => {
    const srv = await server({ body: { ...A_BATCH, state: 'complete' }, failFirst: { count: 3, status: 503, code: 'unavailable' } });
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      const shared = new AbortController();
      for (let i = 0; i < 50; i++) await client.waitForCompletion(A_BATCH.id, { signal: shared.signal, retry: { firstDelayMs: 1 } });
      expect(srv.seen.requests).toBe(53); // the first wait rode out three 503s (pauses included)
      expect(getEventListeners(shared.signal, 'abort')).toHaveLength(0);
    } finally {
      await srv.close();
    }
  });

  it('when ack() is given one ID as a string, then it refuses it (its characters went out as IDs, nothing acked)', async () => {
    const srv = await server();
    try {
      const client = new RollcallClient({ baseUrl: srv.url });
      await expect(client.ack('0190a0e0-0000-7000-8000-000000000000:0190a0e0-0000-7000-8000-000000000001:0')).rejects.toThrow(TypeError);
      expect(srv.seen.requests).toBe(0);
    } finally {
      await srv.close();
    }
  });

  it('when a request cannot be sent (a token with a line break, a URL without http), then the integrations do not retry it', async () => {
    const srv = await server();
    try {
      for (const client of [
        new RollcallClient({ baseUrl: srv.url, token: 'a-token-read-with-its-newline\n' }),
        new RollcallClient({ baseUrl: 'rollcall:18501' }),
      ]) {
        const started = Date.now();
        await expect(withRetries(() => client.list())).rejects.toMatchObject({ code: expect.stringMatching(/^ERR_INVALID_/) });
        expect(Date.now() - started).toBeLessThan(1000); // not ~29 s of retries
      }
      expect(srv.seen.requests).toBe(0);
      // A network error is still tried again.
      let tries = 0;
      const refused = () => {
        tries += 1;
        return Promise.reject(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }));
      };
      const gone = new RollcallClient({ baseUrl: srv.url, fetch: refused });
      await expect(withRetries(() => gone.list(), { attempts: 3, firstDelayMs: 1 })).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      expect(tries).toBe(3);
    } finally {
      await srv.close();
    }
  });

  it('when something other than rollcall streams an answer longer than a string holds (600 MiB), then the call fails with ERR_ANSWER_TOO_LARGE, once, and the process goes on', async () => {
    const mib = Buffer.alloc(1 << 20, 0x61);
    let requests = 0;
    const srv = http.createServer((_req, res) => {
      requests += 1;
      res.writeHead(200, { 'content-type': 'application/json' });
      let sent = 0;
      const pump = () => {
        while (sent < 600) {
          sent += 1;
          if (!res.write(mib)) return void res.once('drain', pump);
        }
        res.end();
      };
      res.on('close', () => (sent = 600));
      pump();
    });
    await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
    try {
      const client = new RollcallClient({ baseUrl: `http://127.0.0.1:${(srv.address() as AddressInfo).port}` });
      await expect(withRetries(() => client.status(A_BATCH.id))).rejects.toMatchObject({ code: 'ERR_ANSWER_TOO_LARGE' });
      expect(requests).toBe(1); // not sent again: no retry makes it rollcall
    } finally {
      srv.closeAllConnections();
      await new Promise((resolve) => srv.close(resolve));
    }
  });

  it('when connectTimeoutMs is Infinity, then a connection may take as long as the request may; 0 or less is refused at once', async () => {
    const blackhole = await unopenablePort();
    try {
      const send = httpSend({ connectTimeoutMs: Infinity });
      const request = { method: 'GET', headers: {}, signal: AbortSignal.timeout(300) };
      await expect(send(`http://127.0.0.1:${blackhole.port}/v1/batches`, request)).rejects.toMatchObject({ name: 'AbortError' });
    } finally {
      blackhole.close();
    }
    for (const ms of [0, -1, Number.NaN]) expect(() => httpSend({ connectTimeoutMs: ms })).toThrow(RangeError);
  });

  it('when a connection does not open in time, then the request fails with ETIMEDOUT', async () => {
    const blackhole = await unopenablePort();
    try {
      const send = httpSend({ connectTimeoutMs: 200 });
      await expect(send(`http://127.0.0.1:${blackhole.port}/v1/batches`, { method: 'GET', headers: {} })).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    } finally {
      blackhole.close();
    }
  });

  it('when a TLS server takes the connection but never completes its handshake, then the connect limit still ends the request', async () => {
    const silent = net.createServer(() => undefined); // accepts, answers nothing: no ServerHello
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const send = httpSend({ connectTimeoutMs: 200 });
      const started = Date.now();
      const request = send(`https://127.0.0.1:${(silent.address() as AddressInfo).port}/v1/batches`, {
        method: 'GET',
        headers: {},
        signal: AbortSignal.timeout(10_000),
      });
      await expect(request).rejects.toMatchObject({ code: 'ETIMEDOUT' });
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      silent.close();
    }
  });

  it('when the service is behind a 308 redirect to another origin, then an ack is sent there whole, without the token', async () => {
    const target = await server();
    const proxy = await server({ redirectTo: { status: 308, location: `${target.url}/v1/acks` } });
    try {
      const body = JSON.stringify({ ids: ['a:b:0'] });
      const answer = await httpSend()(`${proxy.url}/v1/acks`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer secret' },
        body,
      });
      expect({ status: answer.status, body: JSON.parse(await answer.text()) }).toMatchObject({ status: 200, body: { n: 1 } });
      expect(proxy.last.headers.authorization).toBe('Bearer secret');
      expect({ method: target.last.method, body: JSON.parse(target.last.body), authorization: target.last.headers.authorization }).toEqual({
        method: 'POST',
        body: { ids: ['a:b:0'] },
        authorization: undefined,
      });
    } finally {
      await Promise.all([target.close(), proxy.close()]);
    }
  });

  it('when a POST meets a 303 redirect, then it is not followed and the client says which status came back', async () => {
    const target = await server();
    const proxy = await server({ redirectTo: { status: 303, location: `${target.url}/v1/batches` } });
    try {
      const error = await new RollcallClient({ baseUrl: proxy.url }).open().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RollcallApiError);
      expect(error).toMatchObject({ status: 303, code: 'http_error' });
      expect(target.seen.requests).toBe(0);
    } finally {
      await Promise.all([target.close(), proxy.close()]);
    }
  });
});
