import { randomUUID } from 'node:crypto';

import { Knex } from 'knex';
import pino from 'pino';

import { sweepOnce } from '../../src/service/sweep';
import { deleteBatchesWithGroups } from '../../src/store/removeBatches';
import { inTransaction } from '../../src/store/transaction';
import { backends, describeEachOrSkip, serverBackends, withCitusForms } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { realSleep } from '../helpers/realTime';
import { Receiver } from '../helpers/receiver';
import { holdBatchRow, otherConnections } from '../helpers/rowLocks';
import { startService, TestService } from '../helpers/service';

const DAY = 86_400_000;

describe.each(withCitusForms(backends()))('sweeping stale batches (%s)', (_name, backend) => {
  let svc: TestService;
  beforeEach(async () => {
    svc = await startService(backend, { OPEN_BATCH_TTL: '7d', COMPLETED_RETENTION: '1d', SWEEP_CHUNK: '2' });
  });
  afterEach(() => svc.stop());

  /** A batch left open (an idle producer's), with `count` items. */
  const open = (count = 0) => batchWith(svc.client, count, { sealed: false });
  const exists = async (id: string) => (await svc.api.get(`/v1/batches/${id}`)).status === 200;
  const sweep = async () => {
    const res = await svc.api.post('/v1/admin/sweep');
    expect(res.status).toBe(200);
    return res.body as { batchesRemoved: number; groupsRemoved: number };
  };

  it('when open and sealed batches are idle for the TTL, then they go with their groups, in chunks', async () => {
    const idle = [
      await open(20_000), // 3 groups
      await batchWith(svc.client, 5), // 1 group, sealed, never completed
      await open(), // no groups
    ];
    svc.clock.now += 7 * DAY - 1000;
    const busy = await open(3);
    svc.clock.now += 2000; // idle ones are now past the TTL; `busy` is not
    expect(await sweep()).toEqual({ batchesRemoved: 3, groupsRemoved: 4 });
    for (const { id } of idle) expect(await exists(id)).toBe(false);
    expect(await exists(busy.id)).toBe(true);
    expect((await svc.api.post('/v1/acks').send({ ids: busy.ids })).body.acked).toBe(3);
    expect(await sweep()).toEqual({ batchesRemoved: 0, groupsRemoved: 0 });
  });

  it('when a sweep fails after some chunks, then the batches those removed are counted in the metrics', async () => {
    const idle = [await open(1), await open(1), await open(1)]; // SWEEP_CHUNK 2: two chunks
    svc.clock.now += 8 * DAY;
    // The clock fails on the sweep's second read of it (before its second chunk), as a database
    // error in that chunk would: the first chunk has committed. Only the sweep's reads count (the
    // callback loops read the clock too, every second).
    const { now } = svc.clock;
    let reads = 0;
    Object.defineProperty(svc.clock, 'now', {
      configurable: true,
      get: () => {
        if (new Error().stack?.includes('sweepChunks') && ++reads === 2) throw new Error('the second chunk failed');
        return now;
      },
    });
    try {
      expect((await svc.api.post('/v1/admin/sweep')).status).toBeGreaterThanOrEqual(500);
    } finally {
      Object.defineProperty(svc.clock, 'now', { configurable: true, writable: true, value: now });
    }
    const gone = (await Promise.all(idle.map(({ id }) => exists(id)))).filter((kept) => !kept).length;
    expect(gone).toBe(2);
    const metrics = (await svc.api.get('/metrics')).text;
    expect(metrics).toContain(`rollcall_sweeper_batches_removed_total ${gone}`);
    expect(metrics).toContain(`rollcall_sweeper_groups_removed_total ${gone}`);
  });

  it('when the pool has one connection, then a sweep removes what is due (it takes no second connection)', async () => {
    const small = await startService(backend, { OPEN_BATCH_TTL: '7d', DB_POOL_SIZE: '1' });
    try {
      const idle = await batchWith(small.client, 2, { sealed: false });
      small.clock.now += 8 * DAY;
      const res = await small.api.post('/v1/admin/sweep');
      expect([res.status, res.body]).toEqual([200, { batchesRemoved: 1, groupsRemoved: 1 }]);
      expect((await small.api.get(`/v1/batches/${idle.id}`)).status).toBe(404);
    } finally {
      await small.stop();
    }
  });

  it('when a sweep is asked for with a body that has fields, then 400 and nothing is swept', async () => {
    const { id } = await open(1);
    svc.clock.now += 8 * DAY;
    const res = await svc.api.post('/v1/admin/sweep').send({ dryRun: true });
    expect([res.status, res.body.error?.code]).toEqual([400, 'invalid_request']);
    expect(await exists(id)).toBe(true);
    expect((await svc.api.post('/v1/admin/sweep').send({})).status).toBe(200);
    expect(await exists(id)).toBe(false);
  });

  it('when a shutdown begins during a sweep, then it ends after the chunk under way, and the next sweep removes the rest', async () => {
    const idle = await Promise.all(Array.from({ length: 5 }, () => open(1)));
    svc.clock.now += 8 * DAY;
    let chunks = 0;
    const options = { openBatchTtlMs: 7 * DAY, completedRetentionMs: DAY, chunk: 2 };
    expect(await sweepOnce(svc.rollcall.deps, { ...options, stopped: () => chunks++ >= 1 })).toEqual({ batchesRemoved: 2, groupsRemoved: 2 });
    expect((await Promise.all(idle.map(({ id }) => exists(id)))).filter(Boolean)).toHaveLength(3);
    expect(await sweep()).toEqual({ batchesRemoved: 3, groupsRemoved: 3 });
  });

  it('when due batches hold more group and failure-reason rows than SWEEP_CHUNK_ROWS, then each chunk takes as many as fit (a larger one alone), and the sweep removes them all', async () => {
    const idle = [await open(20_000), await open(1), await open(1)]; // 3 groups, 1, 1
    const failed = await batchWith(svc.client, 3); // 1 group and, once failed, 3 stored reasons
    await svc.api.post('/v1/acks').send({ ids: failed.ids, outcome: 'failed', error: 'out of memory' });
    svc.clock.now += 8 * DAY;
    const chunks: Array<{ batchesRemoved: number; groupsRemoved: number }> = [];
    const options = { openBatchTtlMs: 7 * DAY, completedRetentionMs: DAY, chunk: 10, chunkRows: 3 };
    expect(await sweepOnce(svc.rollcall.deps, { ...options, removed: (chunk) => chunks.push(chunk) })).toEqual({ batchesRemoved: 4, groupsRemoved: 6 });
    for (const chunk of chunks) if (chunk.batchesRemoved > 1) expect(chunk.groupsRemoved).toBeLessThanOrEqual(3);
    expect(chunks.filter((chunk) => chunk.batchesRemoved > 0).length).toBeGreaterThanOrEqual(3); // 3 + 1 + 1 rows, then 4 alone
    for (const { id } of [...idle, failed]) expect(await exists(id)).toBe(false);
    expect(
      await svc.rollcall
        .db('failure_reasons')
        .count({ n: '*' })
        .then(([row]) => Number(row?.n)),
    ).toBe(0);
  });

  it('when an ack touched an old batch, then its clock starts again', async () => {
    const { id, ids } = await open(2);
    svc.clock.now += 6 * DAY;
    await svc.api.post('/v1/acks').send({ ids: ids.slice(0, 1) });
    svc.clock.now += 2 * DAY;
    expect((await sweep()).batchesRemoved).toBe(0);
    expect(await exists(id)).toBe(true);
  });

  it('when a batch completed, then it stays for the retention, and past it while its callback is pending', async () => {
    const { id } = await batchWith(svc.client, 0, { callbackUrl: 'http://127.0.0.1:9/cb' });
    await svc.rollcall.dispatcher.deliverDue(); // its first attempt: CALLBACK_MAX_AGE counts from here
    svc.clock.now += DAY - 1000;
    expect((await sweep()).batchesRemoved).toBe(0);
    expect((await svc.api.get(`/v1/batches/${id}`)).body.state).toBe('complete');
    expect((await svc.api.get(`/v1/batches/${id}/events`)).body.events).toHaveLength(1);
    svc.clock.now += 2000;
    expect((await sweep()).batchesRemoved).toBe(0);
    expect(await exists(id)).toBe(true);
    svc.clock.now += 3 * DAY; // past CALLBACK_MAX_AGE: the next failed attempt gives the event up
    await svc.rollcall.dispatcher.deliverDue();
    expect((await svc.api.get(`/v1/batches/${id}/events`)).body.events[0].status).toBe('dead');
    expect(await sweep()).toEqual({ batchesRemoved: 1, groupsRemoved: 0 });
    expect(await exists(id)).toBe(false);
    expect(await svc.rollcall.db('outbox').where('batch_id', id)).toEqual([]);
  });

  it('when COMPLETED_RETENTION is 0, then a batch goes as soon as its callback is delivered, not before', async () => {
    const receiver = new Receiver();
    await receiver.start();
    const eager = await startService(backend, { COMPLETED_RETENTION: '0' });
    try {
      const { id } = await batchWith(eager.client, 0, { callbackUrl: receiver.url });
      eager.clock.now += 1000;
      expect((await eager.api.post('/v1/admin/sweep')).body.batchesRemoved).toBe(0);
      expect(await eager.rollcall.dispatcher.deliverDue()).toBe(1);
      expect(JSON.parse(receiver.deliveries[0]!.body).batch.id).toBe(id);
      expect((await eager.api.post('/v1/admin/sweep')).body.batchesRemoved).toBe(1);
    } finally {
      await eager.stop();
      await receiver.stop();
    }
  });

  it('when a parent is idle but its child is still acked, then the parent stays and the child completes it', async () => {
    const parent = await batchWith(svc.client, 1);
    const child = await batchWith(svc.client, 2, { parentItem: parent.ids[0] });
    svc.clock.now += 6 * DAY;
    expect((await svc.api.post('/v1/acks').send({ ids: [child.ids[0]] })).body.acked).toBe(1);
    svc.clock.now += 2 * DAY; // the parent idle 8 days, its child 2
    expect(await sweep()).toEqual({ batchesRemoved: 0, groupsRemoved: 0 });
    expect((await svc.api.post('/v1/acks').send({ ids: [child.ids[1]] })).body.completed).toHaveLength(1);
    // The child is done, its outcome not yet acked into the parent's item: the parent still waits for it.
    expect(await sweep()).toEqual({ batchesRemoved: 0, groupsRemoved: 0 });
    await svc.rollcall.childOutcomes.deliverDue();
    expect((await svc.api.get(`/v1/batches/${parent.id}`)).body).toMatchObject({ state: 'complete', succeeded: 1 });
  });

  it.each([
    ['deleted by its owner', async (childId: string) => void (await svc.api.delete(`/v1/batches/${childId}`))],
    ['swept past its own retention', async () => void (svc.clock.now += 2 * DAY)],
  ])('when an idle parent’s child is done and then %s before its outcome is acked, then the parent still waits for that outcome', async (_what, goChild) => {
    const parent = await batchWith(svc.client, 1);
    const child = await batchWith(svc.client, 1, { parentItem: parent.ids[0] });
    svc.clock.now += 6 * DAY;
    expect((await svc.api.post('/v1/acks').send({ ids: child.ids })).body.completed).toHaveLength(1);
    svc.clock.now += 2 * DAY; // the parent idle 8 days
    await goChild(child.id);
    await sweep();
    expect([await exists(child.id), await exists(parent.id)]).toEqual([false, true]);
    await svc.rollcall.childOutcomes.deliverDue();
    expect((await svc.api.get(`/v1/batches/${parent.id}`)).body).toMatchObject({ state: 'complete', succeeded: 1 });
  });

  it('when a cancelled parent is past its retention while its child still works, then the parent goes and the child stays', async () => {
    const parent = await batchWith(svc.client, 1);
    const child = await batchWith(svc.client, 2, { parentItem: parent.ids[0] });
    await svc.client.cancel(parent.id);
    svc.clock.now += 2 * DAY;
    expect((await svc.api.post('/v1/acks').send({ ids: [child.ids[0]] })).body.acked).toBe(1);
    // A cancelled parent takes no outcome: it is not passed over at every sweep for its child's sake.
    expect(await sweep()).toEqual({ batchesRemoved: 1, groupsRemoved: 1 });
    expect([await exists(parent.id), await exists(child.id)]).toEqual([false, true]);
    expect((await svc.api.post('/v1/acks').send({ ids: [child.ids[1]] })).body.completed).toHaveLength(1);
    await svc.rollcall.childOutcomes.deliverDue(); // the parent is gone: its outcome is dropped, not retried for ever
    expect(await sweep()).toEqual({ batchesRemoved: 0, groupsRemoved: 0 });
  });

  it('when a parent and its child are both idle, then one sweep removes both (the child first)', async () => {
    const parent = await batchWith(svc.client, 1);
    const child = await batchWith(svc.client, 2, { parentItem: parent.ids[0] });
    svc.clock.now += 8 * DAY;
    expect(await sweep()).toEqual({ batchesRemoved: 2, groupsRemoved: 2 });
    expect([await exists(child.id), await exists(parent.id)]).toEqual([false, false]);
  });

  it('when the sweeper loop runs, then it removes due batches on its own', async () => {
    const { id } = await open();
    svc.clock.now += 8 * DAY;
    svc.rollcall.startBackground();
    for (let i = 0; i < 100 && (await exists(id)); i++) await new Promise((r) => setTimeout(r, 20));
    expect(await exists(id)).toBe(false);
  });
});

// On SQLite a sweep runs in the process without a pause, so calls never overlap there.
describeEachOrSkip(serverBackends())('sweeps asked for at once (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { OPEN_BATCH_TTL: '7d', SWEEP_CHUNK: '2' });
  });
  afterAll(() => svc.stop());

  it('when 20 sweeps are asked for at once, then every due batch is gone when they are answered, and they share a few runs', async () => {
    const idle = await Promise.all(Array.from({ length: 10 }, () => batchWith(svc.client, 1, { sealed: false })));
    svc.clock.now += 8 * DAY;
    const runs = async () => Number(/^rollcall_sweeper_runs_total (\d+)$/m.exec((await svc.api.get('/metrics')).text)?.[1]);
    const before = await runs();
    const answers = await Promise.all(Array.from({ length: 20 }, () => svc.api.post('/v1/admin/sweep')));
    expect(answers.map((a) => a.status)).toEqual(Array.from({ length: 20 }, () => 200));
    expect(answers.reduce((n, a) => n + (a.body as { batchesRemoved: number }).batchesRemoved, 0)).toBeGreaterThanOrEqual(10);
    for (const { id } of idle) expect((await svc.api.get(`/v1/batches/${id}`)).status).toBe(404);
    // Each runs on a connection of its own: one run per call took as many connections as calls.
    expect((await runs()) - before).toBeLessThan(10);
  });
});

describeEachOrSkip(withCitusForms(serverBackends()))('sweeping past batches another connection holds (%s)', (_name, backend) => {
  let svc: TestService;
  let holder: Knex;
  beforeAll(async () => {
    svc = await startService(backend, { OPEN_BATCH_TTL: '1d', SWEEP_CHUNK: '2' });
    holder = otherConnections(svc.database, 2);
  });
  afterAll(async () => {
    await holder.destroy();
    await svc.stop();
  });

  it('when the oldest due batches are held (acks in flight), then a sweep still removes every due batch behind them', async () => {
    const stale = [];
    for (let i = 0; i < 7; i++) {
      stale.push(await batchWith(svc.client, 1, { sealed: false }));
      svc.clock.now += 1000; // oldest first in the sweep's scan
    }
    svc.clock.now += 2 * DAY;
    // The first chunk's two candidates: held, as an ack's transaction holds its batch rows.
    const releases = [await holdBatchRow(holder, stale[0]!.id), await holdBatchRow(holder, stale[1]!.id)];
    try {
      expect(await svc.api.post('/v1/admin/sweep').then((r) => r.body)).toEqual({ batchesRemoved: 5, groupsRemoved: 5 });
      const left = [];
      for (const { id } of stale) if ((await svc.api.get(`/v1/batches/${id}`)).status === 200) left.push(id);
      expect(left).toEqual([stale[0]!.id, stale[1]!.id]);
    } finally {
      for (const release of releases) await release();
    }
    expect(await svc.api.post('/v1/admin/sweep').then((r) => r.body)).toEqual({ batchesRemoved: 2, groupsRemoved: 2 });
  });

  it('when a sweep has passed over its most candidates, then it ends there and says so, and the next sweep removes the rest', async () => {
    const stale = [];
    for (let i = 0; i < 5; i++) {
      stale.push(await batchWith(svc.client, 1, { sealed: false }));
      svc.clock.now += 1000;
    }
    svc.clock.now += 2 * DAY;
    // Every candidate held, so which the first chunk reads does not matter (Citus reads shards in no set order).
    const holding = await holder.transaction();
    for (const { id } of stale) await holding('batches').where({ id }).forUpdate(); // one row a statement: Citus routes each to its shard
    const logged = jest.spyOn(svc.rollcall.deps.log, 'info');
    const sweep = () => sweepOnce(svc.rollcall.deps, { openBatchTtlMs: DAY, completedRetentionMs: DAY, chunk: 2, maxPassedOver: 2 });
    try {
      expect(await sweep()).toEqual({ batchesRemoved: 0, groupsRemoved: 0 });
      // Its first chunk passed over two, and it ended there: not after passing over all five.
      const ended = logged.mock.calls.filter(([, message]) => String(message).startsWith('sweep ended after passing over'));
      expect(ended.map(([fields]) => (fields as { passedOver: number }).passedOver)).toEqual([2]);
    } finally {
      logged.mockRestore();
      await holding.rollback();
    }
    expect(await sweep()).toEqual({ batchesRemoved: 5, groupsRemoved: 5 });
  });
});

describe.each(backends())('removing more batches than one statement may bind (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  it('when a chunk of 70,000 batches is deleted (SWEEP_CHUNK may be 100,000), then its statements stay within the bind limits', async () => {
    const { id } = await batchWith(svc.client, 3);
    const ids = [id, ...Array.from({ length: 70_000 }, () => randomUUID())];
    expect(await inTransaction(svc.rollcall.db, svc.rollcall.deps.tx, (trx) => deleteBatchesWithGroups(trx, ids))).toBe(1);
    expect((await svc.api.get(`/v1/batches/${id}`)).status).toBe(404);
  }, 60_000);
});

describe.each(backends())('the sweeper during a shutdown (%s)', (_name, backend) => {
  it('when its timer fires between the shutdown’s start and the loops’ stop, then it logs no failed task', async () => {
    const said: Array<{ msg: string }> = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => void said.push(JSON.parse(line)) });
    const svc = await startService(backend, { SWEEP_INTERVAL: '100ms' }, { log });
    try {
      svc.rollcall.startBackground();
      svc.rollcall.beginShutdown();
      await realSleep(450);
      expect(said.map((line) => line.msg)).toEqual([]);
    } finally {
      await svc.stop();
    }
  });
});
