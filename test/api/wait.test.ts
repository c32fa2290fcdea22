import http from 'node:http';
import { AddressInfo, connect } from 'node:net';

import { createServer } from '../../src/http/server';
import { createRollcall } from '../../src/rollcall';
import { poolStats } from '../../src/store/db';
import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { realSleep, until } from '../helpers/realTime';
import { startReplica, startService, TestService } from '../helpers/service';

describe.each(backends())('waiting for completion (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { WAIT_POLL_INTERVAL: '100ms' });
  });
  afterAll(() => svc.stop());

  const sealed = (count: number) => batchWith(svc.client, count);

  it('when the batch is already complete, then the wait answers at once', async () => {
    const { id } = await batchWith(svc.client, 0);
    const res = await svc.api.get(`/v1/batches/${id}/wait?timeout=60`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id, state: 'complete' });
  });

  it('when the timeout passes first, then the wait answers with the current state', async () => {
    const { id } = await sealed(2);
    const res = await svc.api.get(`/v1/batches/${id}/wait?timeout=0.3`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id, state: 'sealed', pending: 2 });
  });

  it('when an ack in this process completes the batch, then the waiter is answered before its timeout', async () => {
    const { id, ids } = await sealed(3);
    const started = Date.now();
    const waiting = svc.api.get(`/v1/batches/${id}/wait?timeout=60`).then((r) => r);
    await new Promise((r) => setTimeout(r, 100));
    await svc.api.post('/v1/acks').send({ ids });
    const res = await waiting;
    expect(res.body).toMatchObject({ state: 'complete', pending: 0 });
    expect(Date.now() - started).toBeLessThan(30_000);
  });

  it('when the completing ack goes through another replica, then the waiter here is answered too', async () => {
    const replica = await startReplica(svc);
    try {
      const { id, ids } = await sealed(3);
      const started = Date.now();
      const waiting = svc.api.get(`/v1/batches/${id}/wait?timeout=60`).then((r) => r);
      await new Promise((r) => setTimeout(r, 100));
      const ack = await replica.api.post('/v1/acks').send({ ids });
      expect(ack.body.completed).toHaveLength(1);
      const res = await waiting;
      expect(res.body).toMatchObject({ state: 'complete' });
      expect(Date.now() - started).toBeLessThan(30_000);
    } finally {
      await replica.stop();
    }
  });

  it.each([
    ['here', false],
    ['through another replica', true],
  ])('when the batch is deleted %s while a client waits, then the wait is answered 404 then, not at its timeout', async (_where, elsewhere) => {
    const replica = elsewhere ? await startReplica(svc) : null;
    try {
      const { id } = await sealed(2);
      const started = Date.now();
      const waiting = svc.api.get(`/v1/batches/${id}/wait?timeout=30`).then((r) => r);
      for (let i = 0; i < 100 && svc.rollcall.watcher.waiting === 0; i++) await new Promise((r) => setTimeout(r, 20));
      expect((await (replica ?? svc).api.delete(`/v1/batches/${id}`)).status).toBe(204);
      const res = await waiting;
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('batch_not_found');
      expect(Date.now() - started).toBeLessThan(15_000);
      expect(svc.rollcall.watcher.waiting).toBe(0);
    } finally {
      await replica?.stop();
    }
  });

  it('when the client goes away while the batch is first read, then no waiter is kept for it: nothing polls the database for that batch until its timeout', async () => {
    // A replica whose one pooled connection is busy (here: a transaction the test holds open), so
    // the wait's first read of the batch queues for it, and the client can leave meanwhile.
    const replica = await createRollcall({ ...svc.database.config, DB_POOL_SIZE: 1 }, { now: () => svc.clock.now });
    const server = createServer(replica.app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    let release = () => {};
    try {
      const { id } = await sealed(2);
      const held = new Promise<void>((holding) => {
        void replica.db.transaction(async (trx) => {
          await trx.raw('SELECT 1');
          await new Promise<void>((resolve) => {
            release = resolve;
            holding();
          });
        });
      });
      await held;

      const request = http.get(`http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/batches/${id}/wait?timeout=30`);
      request.on('error', () => undefined); // the test ends it
      await until(() => poolStats(replica.db)!.pendingAcquires === 1); // the first read waits for the connection
      request.destroy();
      await until(async () => (await new Promise<number>((resolve, reject) => server.getConnections((e, n) => (e ? reject(e) : resolve(n))))) === 0);
      await realSleep(20); // and the request's 'close' has reached the route (its abort)

      release();
      await until(() => poolStats(replica.db)!.pendingAcquires + poolStats(replica.db)!.used === 0); // the first read is done
      // Had a waiter been kept for the client gone, each 100 ms poll would ask for this batch until its timeout.
      let pollsOfTheBatch = 0;
      replica.db.on('query', (query: { bindings?: unknown[] }) => {
        if ((query.bindings ?? []).includes(id)) pollsOfTheBatch += 1;
      });
      await realSleep(800);
      expect({ waiting: replica.watcher.waiting, pollsOfTheBatch }).toEqual({ waiting: 0, pollsOfTheBatch: 0 });
    } finally {
      release();
      replica.watcher.release();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await replica.close();
    }
  });

  it('when a client pipelines two waits and goes, then neither is held any longer', async () => {
    const [first, second] = await Promise.all([sealed(1), sealed(1)]);
    const socket = connect(Number(new URL(svc.url).port), '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.on('error', () => undefined);
    const wait = (id: string) => `GET /v1/batches/${id}/wait?timeout=30 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`;
    socket.write(wait(first.id) + wait(second.id));
    await until(() => svc.rollcall.watcher.holding === 2);
    socket.destroy();
    // The second's answer waits behind the first's: only its request hears the client go.
    await until(() => svc.rollcall.watcher.holding === 0, 5000);
    expect(svc.rollcall.watcher.waiting).toBe(0);
  });

  it('when a wait is sent with a JSON body (an empty object), then it is still held until the batch completes', async () => {
    const { id, ids } = await sealed(1);
    const answer = svc.api.get(`/v1/batches/${id}/wait?timeout=30`).send({}); // its body is read: its request closes then
    const answered = answer.then((res) => res.body as { state: string });
    await until(() => svc.rollcall.watcher.waiting === 1);
    await realSleep(300);
    expect(svc.rollcall.watcher.waiting).toBe(1);
    await svc.api.post('/v1/acks').send({ ids });
    expect(await answered).toMatchObject({ id, state: 'complete' });
  });

  it('when 300 clients wait, then the database sees one shared query per poll, not one per waiter', async () => {
    const batches = await Promise.all(Array.from({ length: 30 }, () => sealed(1)));
    let queries = 0;
    const count = () => (queries += 1);
    const waits = batches.flatMap((b) => Array.from({ length: 10 }, () => svc.api.get(`/v1/batches/${b.id}/wait?timeout=4`).then((r) => r)));
    for (let i = 0; i < 150 && svc.rollcall.watcher.waiting < 300; i++) await new Promise((r) => setTimeout(r, 20));
    svc.rollcall.db.on('query', count);
    await new Promise((r) => setTimeout(r, 500));
    svc.rollcall.db.off('query', count);
    expect(svc.rollcall.watcher.waiting).toBe(300);
    // 100 ms polls over 500 ms: about five queries (each covering all 30 batches).
    expect(queries).toBeLessThanOrEqual(10);
    const results = await Promise.all(waits);
    for (const r of results) expect(r.body.state).toBe('sealed');
    expect(svc.rollcall.watcher.waiting).toBe(0);
  });

  it('when the batch does not exist or the timeout is out of range, then 404 or 400', async () => {
    expect((await svc.api.get('/v1/batches/0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/wait')).status).toBe(404);
    const { id } = await sealed(1);
    // Also what Number() reads but no one writes as a timeout: hex, exponents, empty or blank (0).
    for (const t of ['61', '-1', 'soon', '0x2', '1e1', '', '%20', '2.']) {
      const res = await svc.api.get(`/v1/batches/${id}/wait?timeout=${t}`);
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
  });
});
