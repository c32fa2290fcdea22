import { Knex } from 'knex';

import { ChildOutcomeDispatcher } from '../../src/service/childOutcomeDispatcher';
import { countChildOutcomes } from '../../src/store/childOutcomes';
import { backends, describeEachOrSkip, isPostgresBackend, serverBackends, withCitusForms } from '../helpers/backends';
import { BatchSetup, batchWith } from '../helpers/batches';
import { Delivery, Receiver } from '../helpers/receiver';
import { holdBatchRow, otherConnections, untilLockWaited } from '../helpers/rowLocks';
import { startReplica, startService, TestApp, TestService } from '../helpers/service';

const MISSING = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';

describe.each(withCitusForms(backends()))('nested batches (%s)', (_name, backend) => {
  let svc: TestService;
  beforeEach(async () => {
    svc = await startService(backend);
  });
  afterEach(() => svc.stop());

  const batch = (count: number, setup: BatchSetup = {}) => batchWith(svc.client, count, setup);
  const get = async (id: string) => (await svc.api.get(`/v1/batches/${id}`)).body;

  it('when a child is made for a pending item, then it has parentItem and is listed under its parent', async () => {
    const parent = await batch(3);
    const first = await svc.api.post('/v1/batches').send({ parentItem: parent.ids[0]!.toUpperCase() });
    expect(first.status).toBe(201);
    expect(first.body.parentItem).toBe(parent.ids[0]); // canonical lower case
    const second = (await svc.api.post('/v1/batches').send({ parentItem: parent.ids[1] })).body;
    expect((await get(first.body.id)).parentItem).toBe(parent.ids[0]);
    expect((await get(parent.id)).parentItem).toBeNull();
    const listed = (await svc.api.get(`/v1/batches?parent=${parent.id}`)).body;
    expect(listed.batches.map((b: { id: string }) => b.id)).toEqual([second.id, first.body.id]);
    expect((await svc.api.get(`/v1/batches?parent=${parent.id}&limit=1`)).body.nextCursor).toEqual(expect.any(String));
    expect((await svc.api.get(`/v1/batches?parent=${MISSING}`)).body.batches).toEqual([]);
    const noVersion = await svc.api.get('/v1/batches?parent=12345678-1234-1234-1234-123456789abc'); // a UUID as paths take it
    expect([noVersion.status, noVersion.body.batches]).toEqual([200, []]);
    expect((await svc.api.get(`/v1/batches?parent=${parent.id.toUpperCase()}`)).body.batches).toHaveLength(2);
    expect((await svc.api.get('/v1/batches?parent=nope')).status).toBe(400);
  });

  it('when the child of one item is asked for, then that child alone, by any spelling of the item; none for an item without one', async () => {
    const parent = await batch(3);
    const child = (await svc.api.post('/v1/batches').send({ parentItem: parent.ids[1] })).body;
    await svc.api.post('/v1/batches').send({ parentItem: parent.ids[2] });
    const childOf = async (query: string) => (await svc.api.get(`/v1/batches?${query}`)).body.batches.map((b: { id: string }) => b.id);
    expect(await childOf(`parentItem=${parent.ids[1]}`)).toEqual([child.id]);
    expect(await childOf(`parentItem=${parent.ids[1]!.toUpperCase()}&parent=${parent.id}`)).toEqual([child.id]);
    expect(await childOf(`parentItem=${parent.ids[0]}`)).toEqual([]);
    expect(await childOf(`parentItem=${parent.ids[1]}&parent=${MISSING}`)).toEqual([]);
    expect(await childOf(`parentItem=${parent.ids[1]}&state=sealed`)).toEqual([]);
    for (const bad of ['nope', `${parent.id}:0`, `${parent.ids[1]}x`]) {
      const res = await svc.api.get(`/v1/batches?parentItem=${encodeURIComponent(bad)}`);
      expect([bad, res.status, res.body.error?.code, res.body.error?.message]).toEqual([bad, 400, 'invalid_request', expect.stringContaining('parentItem')]);
    }
  });

  it('when parentItem is malformed, unknown, not pending or taken, then 400, 404 or 409, and no batch', async () => {
    const parent = await batch(3);
    await svc.api.post('/v1/acks').send({ ids: [parent.ids[1]] });
    await svc.api.post('/v1/batches').send({ parentItem: parent.ids[2] });
    const [group] = parent.ids[0]!.split(':').slice(1, 2);
    const before = (await svc.api.get('/v1/batches?limit=500')).body.batches.length;
    const cases: Array<[unknown, number, string]> = [
      ['nope', 400, 'invalid_request'],
      [42, 400, 'invalid_request'],
      [`${MISSING}:${group}:0`, 404, 'item_not_found'],
      [`${parent.id}:${MISSING}:0`, 404, 'item_not_found'],
      [`${parent.id}:${group}:3`, 404, 'item_not_found'],
      [parent.ids[1], 409, 'item_not_pending'],
      [parent.ids[2], 409, 'item_not_pending'],
    ];
    for (const [parentItem, status, code] of cases) {
      const res = await svc.api.post('/v1/batches').send({ parentItem });
      expect([parentItem, res.status, res.body.error?.code]).toEqual([parentItem, status, code]);
    }
    const cancelled = await batch(1);
    await svc.api.post(`/v1/batches/${cancelled.id}/cancel`);
    expect((await svc.api.post('/v1/batches').send({ parentItem: cancelled.ids[0] })).body.error.code).toBe('item_not_pending');
    expect((await svc.api.get('/v1/batches?limit=500')).body.batches.length).toBe(before + 1);
  });

  it('when two children for one item are created at once, then exactly one is made', async () => {
    const parent = await batch(1);
    const results = await Promise.all(Array.from({ length: 8 }, () => svc.api.post('/v1/batches').send({ parentItem: parent.ids[0] })));
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    for (const r of results.filter((x) => x.status !== 201)) expect(r.body.error.code).toBe('item_not_pending');
  });

  it('when the child-outcome loop is stopped (a shutdown), then it starts no round, and the outcome stays for the next process', async () => {
    const parent = await batch(1);
    const child = await batch(1, { parentItem: parent.ids[0] });
    await svc.api.post('/v1/acks').send({ ids: child.ids });
    const stopping = new ChildOutcomeDispatcher(svc.rollcall.deps);
    stopping.stop();
    expect(await stopping.deliverDue()).toBe(0);
    expect((await svc.api.get(`/v1/items/${parent.ids[0]}`)).body.state).toBe('pending');
    expect(await svc.rollcall.childOutcomes.deliverDue()).toBe(1);
    expect((await svc.api.get(`/v1/items/${parent.ids[0]}`)).body.state).toBe('succeeded');
  });

  it('when children complete, fail or are cancelled, then their parent items get that outcome', async () => {
    const parent = await batch(3);
    const ok = await batch(2, { parentItem: parent.ids[0] });
    const bad = await batch(2, { parentItem: parent.ids[1] });
    const dropped = await batch(2, { parentItem: parent.ids[2] });
    await svc.api.post('/v1/acks').send({ ids: ok.ids });
    await svc.api.post('/v1/acks').send({ ids: bad.ids, outcome: 'failed', error: 'leaf error' });
    await svc.api.post(`/v1/batches/${dropped.id}/cancel`);
    expect(await svc.rollcall.childOutcomes.deliverDue()).toBe(3);
    expect(await svc.rollcall.childOutcomes.deliverDue()).toBe(0);
    expect(await get(parent.id)).toMatchObject({ state: 'complete', outcome: 'failed', succeeded: 1, failed: 2, pending: 0 });
    expect((await svc.api.get(`/v1/items/${parent.ids[0]}`)).body.state).toBe('succeeded');
    const failures = (await svc.api.get(`/v1/batches/${parent.id}/failures`)).body.failures;
    expect(failures.map((f: { id: string; error: string }) => [f.id, f.error]).sort()).toEqual(
      [
        [parent.ids[1], 'child batch failed'],
        [parent.ids[2], 'child batch cancelled'],
      ].sort(),
    );
  });

  it('when the parent ack is repeated (a crash before the row went), then it is a duplicate', async () => {
    const parent = await batch(1);
    const child = await batch(1, { parentItem: parent.ids[0] });
    await svc.api.post('/v1/acks').send({ ids: child.ids });
    const [row] = await svc.rollcall.db('child_outcomes').where('batch_id', child.id);
    let completions = 0;
    svc.rollcall.deps.onCompleted = ((original) => (batches) => {
      completions += batches.filter((b) => b.id === parent.id).length;
      original?.(batches);
    })(svc.rollcall.deps.onCompleted);
    await svc.rollcall.childOutcomes.deliverDue();
    await svc.rollcall.db('child_outcomes').insert({ ...row, claim: null }); // as if the delete never happened
    await svc.rollcall.childOutcomes.deliverDue();
    expect(await countChildOutcomes(svc.rollcall.db)).toBe(0);
    expect(await get(parent.id)).toMatchObject({ state: 'complete', succeeded: 1, total: 1 });
    expect(completions).toBe(1);
  });

  it("when a worker acked a parent item failed and its child ends later, then the child's outcome is an ordinary ack: success wins, a failure's reason replaces the worker's", async () => {
    const parent = await batch(3);
    const succeeding = await batch(1, { parentItem: parent.ids[0] });
    const failing = await batch(1, { parentItem: parent.ids[1] });
    await svc.api.post('/v1/acks').send({ ids: parent.ids.slice(0, 2), outcome: 'failed', error: 'gave up: timeout' });
    await svc.api.post('/v1/acks').send({ ids: succeeding.ids });
    await svc.api.post('/v1/acks').send({ ids: failing.ids, outcome: 'failed', error: 'thumbnail too large' });
    await svc.rollcall.childOutcomes.deliverDue();
    expect(await countChildOutcomes(svc.rollcall.db)).toBe(0);
    // API.md: the item gets the child's outcome; a failed item acked succeeded becomes succeeded (a retry won), the latest reason wins.
    expect(await get(parent.id)).toMatchObject({ state: 'sealed', succeeded: 1, failed: 1, pending: 1 });
    const failures = (await svc.api.get(`/v1/batches/${parent.id}/failures`)).body.failures as Array<{ id: string; error: string }>;
    expect(failures.map((f) => [f.id, f.error])).toEqual([[parent.ids[1], 'child batch failed']]);
  });

  it('when a child that ended is deleted before its outcome reached the parent item, then no other child is made for that item; one deleted before it ended frees it', async () => {
    const parent = await batch(2);
    const ended = await batch(1, { parentItem: parent.ids[0] });
    await svc.api.post('/v1/acks').send({ ids: ended.ids });
    expect(await countChildOutcomes(svc.rollcall.db)).toBe(1); // its outcome is on its way
    expect((await svc.api.delete(`/v1/batches/${ended.id}`)).status).toBe(204);
    const another = await svc.api.post('/v1/batches').send({ parentItem: parent.ids[0] });
    expect([another.status, another.body.error?.code]).toEqual([409, 'item_not_pending']);
    await svc.rollcall.childOutcomes.deliverDue();
    expect(await get(parent.id)).toMatchObject({ succeeded: 1, pending: 1 });

    const unended = await batch(1, { parentItem: parent.ids[1] });
    expect((await svc.api.delete(`/v1/batches/${unended.id}`)).status).toBe(204);
    expect((await svc.api.post('/v1/batches').send({ parentItem: parent.ids[1] })).status).toBe(201);
  });

  it('when the parent item was acked by hand, or is gone, then the child outcome is just cleared', async () => {
    const parent = await batch(2);
    const child = await batch(1, { parentItem: parent.ids[0] });
    await svc.api.post('/v1/acks').send({ ids: [parent.ids[0]] });
    await svc.api.post('/v1/acks').send({ ids: child.ids, outcome: 'failed' });
    await svc.rollcall.childOutcomes.deliverDue();
    expect(await get(parent.id)).toMatchObject({ succeeded: 1, failed: 0, pending: 1 }); // succeeded stays succeeded
    const orphanParent = await batch(1);
    const orphan = await batch(1, { parentItem: orphanParent.ids[0] });
    await svc.api.delete(`/v1/batches/${orphanParent.id}`);
    await svc.api.post('/v1/acks').send({ ids: orphan.ids });
    await svc.rollcall.childOutcomes.deliverDue();
    expect(await countChildOutcomes(svc.rollcall.db)).toBe(0);
  });
});

describe.each(withCitusForms(backends()))('nested batches across replicas and levels, with callbacks (%s)', (_name, backend) => {
  jest.setTimeout(60_000);
  let svc: TestService;
  let receiver: Receiver;
  let ticking: NodeJS.Timeout;
  beforeEach(async () => {
    receiver = new Receiver();
    await receiver.start();
    svc = await startService(backend, {
      CALLBACK_POLL_INTERVAL: '50ms',
      CALLBACK_BACKOFF_BASE: '100ms',
      CALLBACK_BACKOFF_CAP: '200ms',
      CALLBACK_TIMEOUT: '2s',
      WAIT_POLL_INTERVAL: '50ms',
    });
    // Background loops run on the injected clock: let it follow real time.
    ticking = setInterval(() => (svc.clock.now += 25), 25);
  });
  afterEach(async () => {
    clearInterval(ticking);
    await svc.stop();
    await receiver.stop();
  });

  /** A sealed batch whose completion is called back to the receiver. */
  const batch = (app: TestApp, count: number, setup: BatchSetup = {}) => batchWith(app.client, count, { callbackUrl: receiver.url, ...setup });
  const completedOf = (id: string) =>
    receiver.deliveries.filter((d) => d.answered?.status === 200 && JSON.parse(d.body).event === 'batch.completed' && JSON.parse(d.body).batch.id === id);
  const firstDelivered = (id: string): Delivery => {
    const [d] = completedOf(id);
    if (!d) throw new Error(`no batch.completed delivered for ${id}`);
    return d;
  };

  it('when children complete on different replicas, then the parent completes once, after their callbacks', async () => {
    const replica = await startReplica(svc);
    svc.rollcall.startBackground();
    replica.rollcall.startBackground();
    try {
      const apps = [svc, replica];
      const apis = apps.map((app) => app.api);
      const parent = await batch(svc, 6);
      const children = [];
      for (let i = 0; i < 6; i++) children.push(await batch(apps[i % 2]!, 3, { parentItem: parent.ids[i] }));
      // The receiver refuses a few attempts and answers some late.
      receiver.script = [500, { status: 200, delayMs: 150 }, 503, { status: 200, delayMs: 50 }];
      await Promise.all(children.map((child, i) => apis[(i + 1) % 2]!.post('/v1/acks').send({ ids: child.ids })));
      const done = (await svc.api.get(`/v1/batches/${parent.id}/wait?timeout=20`)).body;
      expect(done).toMatchObject({ state: 'complete', outcome: 'succeeded', succeeded: 6, total: 6 });
      await receiver.waitFor(7 + 2);
      for (let i = 0; i < 100 && completedOf(parent.id).length === 0; i++) await new Promise((r) => setTimeout(r, 50));
      const parentEvent = firstDelivered(parent.id);
      for (const child of children) expect(firstDelivered(child.id).answered!.at).toBeLessThanOrEqual(parentEvent.receivedAt!);
      const events = await svc.rollcall.db('outbox').where({ batch_id: parent.id, event: 'batch.completed' });
      expect(events).toHaveLength(1);
      expect(new Set(completedOf(parent.id).map((d) => d.headers['x-rollcall-event-id'])).size).toBe(1);
    } finally {
      await replica.stop();
    }
  });

  it('when a 3-level chain finishes from the leaves, then each level completes once, leaves first', async () => {
    svc.rollcall.startBackground();
    const root = await batch(svc, 2);
    const mids = [await batch(svc, 2, { parentItem: root.ids[0] }), await batch(svc, 1, { parentItem: root.ids[1] })];
    const leaves = [
      await batch(svc, 2, { parentItem: mids[0]!.ids[0] }),
      await batch(svc, 2, { parentItem: mids[0]!.ids[1] }),
      await batch(svc, 4, { parentItem: mids[1]!.ids[0] }),
    ];
    receiver.script = [{ status: 200, delayMs: 100 }, 500, 500];
    await svc.api.post('/v1/acks').send({ ids: leaves.flatMap((l) => l.ids).slice(1) });
    await svc.api.post('/v1/acks').send({ ids: [leaves[0]!.ids[0]], outcome: 'failed', error: 'deep' });
    const done = (await svc.api.get(`/v1/batches/${root.id}/wait?timeout=20`)).body;
    expect(done).toMatchObject({ state: 'complete', outcome: 'failed', succeeded: 1, failed: 1 });
    expect(await svc.api.get(`/v1/batches/${mids[0]!.id}`).then((r) => r.body)).toMatchObject({
      state: 'complete',
      outcome: 'failed',
      failed: 1,
      succeeded: 1,
    });
    for (let i = 0; i < 200 && completedOf(root.id).length === 0; i++) await new Promise((r) => setTimeout(r, 50));
    const rootEvent = firstDelivered(root.id);
    for (const mid of mids) {
      expect(firstDelivered(mid.id).answered!.at).toBeLessThanOrEqual(rootEvent.receivedAt!);
    }
    for (const [leaf, mid] of [
      [leaves[0], mids[0]],
      [leaves[1], mids[0]],
      [leaves[2], mids[1]],
    ] as const) {
      expect(firstDelivered(leaf!.id).answered!.at).toBeLessThanOrEqual(firstDelivered(mid!.id).receivedAt!);
    }
    expect(completedOf(root.id)).toHaveLength(1);
    // Each level completed once: one completion event each, leaves, middles and root.
    for (const { id } of [root, ...mids, ...leaves])
      expect([id, (await svc.rollcall.db('outbox').where({ batch_id: id, event: 'batch.completed' })).length]).toEqual([id, 1]);
    const failures = (await svc.api.get(`/v1/batches/${root.id}/failures`)).body.failures;
    expect(failures).toEqual([expect.objectContaining({ id: root.ids[0], error: 'child batch failed' })]);
  });
});

describeEachOrSkip(serverBackends())('nested batches whose parent row another connection holds (%s)', (_name, backend) => {
  let svc: TestService;
  let holder: Knex;
  beforeAll(async () => {
    svc = await startService(backend, { LOCK_TIMEOUT: '1s' });
    holder = otherConnections(svc.database, 1);
  });
  afterAll(async () => {
    await holder.destroy();
    await svc.stop();
  });

  it('when one parent is held while children of two parents finish, then the other parent’s row is not held while the first is waited for', async () => {
    const free = await batchWith(svc.client, 2); // made first: its id sorts first, so a transaction locking both takes it first
    const held = await batchWith(svc.client, 1);
    await batchWith(svc.client, 1, { parentItem: free.ids[0] }).then((child) => svc.api.post('/v1/acks').send({ ids: child.ids }));
    await batchWith(svc.client, 1, { parentItem: held.ids[0] }).then((child) => svc.api.post('/v1/acks').send({ ids: child.ids }));
    const prober = otherConnections(svc.database, 1);
    const release = await holdBatchRow(holder, held.id);
    try {
      const delivering = svc.rollcall.childOutcomes.deliverDue().catch((error: unknown) => error);
      await untilLockWaited(prober, isPostgresBackend(backend.name));
      // Another replica's ack of the free parent would wait here for LOCK_TIMEOUT if its row were held.
      const probe = await prober.raw(`SELECT id FROM batches WHERE id = ? FOR UPDATE NOWAIT`, [free.id]).then(
        () => 'free',
        (error: { message: string }) => error.message,
      );
      expect(probe).toBe('free');
      expect(await delivering).toMatchObject({ code: 'unavailable' });
      expect((await svc.api.get(`/v1/items/${free.ids[0]}`)).body.state).toBe('succeeded');
    } finally {
      await release();
      await prober.destroy();
    }
    svc.clock.now += 120_000; // past the retry's delay: the held parent's item gets its outcome too
    expect(await svc.rollcall.childOutcomes.deliverDue()).toBe(1);
    expect((await svc.api.get(`/v1/items/${held.ids[0]}`)).body.state).toBe('succeeded');
  }, 30_000);

  it('when one parent cannot be acked now, then the other children’s outcomes still reach their parents, and its own later', async () => {
    const held = await batchWith(svc.client, 1);
    const free = await batchWith(svc.client, 1);
    const heldChild = await batchWith(svc.client, 1, { parentItem: held.ids[0] });
    const freeChild = await batchWith(svc.client, 1, { parentItem: free.ids[0] });
    await svc.api.post('/v1/acks').send({ ids: [...heldChild.ids, ...freeChild.ids] }); // both children complete
    const release = await holdBatchRow(holder, held.id);
    try {
      await expect(svc.rollcall.childOutcomes.deliverDue()).rejects.toMatchObject({ code: 'unavailable' });
      expect((await svc.api.get(`/v1/batches/${free.id}`)).body).toMatchObject({ state: 'complete', succeeded: 1 });
    } finally {
      await release();
    }
    expect((await svc.api.get(`/v1/batches/${held.id}`)).body.state).toBe('sealed');
    svc.clock.now += 120_000; // past the retry's delay
    expect(await svc.rollcall.childOutcomes.deliverDue()).toBe(1);
    expect((await svc.api.get(`/v1/batches/${held.id}`)).body).toMatchObject({ state: 'complete', succeeded: 1 });
  }, 30_000);
});

describeEachOrSkip(serverBackends())('nested batches whose parent row is held for longer than a claim of child outcomes lasts (%s)', (_name, backend) => {
  let svc: TestService;
  let holder: Knex;
  beforeAll(async () => {
    // The ack's lock wait outlasts the steps of the test on a slow machine; the lease runs on the test's clock.
    svc = await startService(backend, { LOCK_TIMEOUT: '10s' });
    holder = otherConnections(svc.database, 1);
  });
  afterAll(async () => {
    await holder.destroy();
    await svc.stop();
  });

  /** Parent items acked again after they had their outcome: the work of two replicas on one row. */
  const duplicateAcks = async () =>
    Number(/rollcall_ack_items_total\{outcome="succeeded",result="duplicate"\} (\d+)/.exec((await svc.api.get('/metrics')).text)?.[1] ?? 0);

  it('when a held parent takes a round past its lease and another replica claims what is due, then each parent item is acked by one replica, once', async () => {
    const held = await batchWith(svc.client, 1);
    const free = await batchWith(svc.client, 1);
    await batchWith(svc.client, 1, { parentItem: held.ids[0] }).then((child) => svc.api.post('/v1/acks').send({ ids: child.ids }));
    svc.clock.now += 1; // the held parent's outcome is older: the round acks it first
    await batchWith(svc.client, 1, { parentItem: free.ids[0] }).then((child) => svc.api.post('/v1/acks').send({ ids: child.ids }));
    const duplicatesBefore = await duplicateAcks();
    const prober = otherConnections(svc.database, 1);
    const release = await holdBatchRow(holder, held.id);
    try {
      const delivering = svc.rollcall.childOutcomes.deliverDue().catch((error: unknown) => error);
      await untilLockWaited(prober, isPostgresBackend(backend.name));
      svc.clock.now += 6_000; // the round's claim (5 s) has run out
      const otherReplica = new ChildOutcomeDispatcher(svc.rollcall.deps);
      expect(await otherReplica.deliverDue()).toBe(1); // the free parent's, left to it; the held one's lease was renewed
      await release();
      expect(await delivering).toBe(1); // the held parent's only
    } finally {
      await release();
      await prober.destroy();
    }
    for (const parent of [held, free]) expect((await svc.api.get(`/v1/items/${parent.ids[0]}`)).body.state).toBe('succeeded');
    expect(await duplicateAcks()).toBe(duplicatesBefore);
    expect(await countChildOutcomes(svc.rollcall.db)).toBe(0);
  }, 30_000);
});
