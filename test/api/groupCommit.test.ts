import { callFromIds } from '../../src/domain/ackCall';
import { AckCommitter } from '../../src/service/ackCommitter';
import { profileOf } from '../../src/store/dialect';
import { backends, withCitusForms } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { shuffled, startService, TestService } from '../helpers/service';

describe.each(withCitusForms(backends()))('group commit of concurrent acks (%s)', (_name, backend) => {
  let svc: TestService;
  beforeEach(async () => {
    svc = await startService(backend, { ACK_GROUP_COMMIT_WINDOW_MS: '20' });
  });
  afterEach(() => svc.stop());

  const sealed = (count: number) => batchWith(svc.client, count);

  it('when 300 small calls arrive together, then they share transactions and each gets its own result', async () => {
    const { id, ids } = await sealed(250);
    // Each call: 1-2 items (some repeated across calls), and a malformed ID of its own.
    const calls = shuffled(ids, 5).map((itemId, i) => [itemId, ...(i % 5 === 0 ? [ids[(i * 7) % ids.length]!] : []), `bad-${i}`]);
    calls.push(...ids.slice(0, 50).map((itemId, i) => [itemId, `bad-extra-${i}`]));
    const before = { ...svc.rollcall.committer!.stats };
    const results = await Promise.all(calls.map((body) => svc.api.post('/v1/acks').send({ ids: body })));
    const stats = svc.rollcall.committer!.stats;
    expect(stats.calls - before.calls).toBe(calls.length);
    // supertest opens its connections one by one, so calls trickle in; a call that finds no round
    // running starts one at once, so merged rounds hold ~4 calls here, not all that were sent (2.7 on
    // a slow, busy CI machine's PostgreSQL): at least two on average, where one each would be 300.
    expect(stats.transactions - before.transactions).toBeLessThan(calls.length / 2);

    let acked = 0;
    let completions = 0;
    results.forEach((res, i) => {
      expect(res.status).toBe(200);
      const body = calls[i]!;
      expect(res.body.acked + res.body.duplicates + res.body.rejected.length).toBe(body.length);
      expect(res.body.rejected).toEqual([{ id: body[body.length - 1], reason: 'malformed' }]);
      acked += res.body.acked;
      completions += res.body.completed.length;
    });
    expect(acked).toBe(250);
    expect(completions).toBe(1);
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ state: 'complete', succeeded: 250 });
  });

  /** A real database failure: a trigger (on PostgreSQL a check, which Citus also takes on a distributed table). */
  async function refuseBatchUpdates(condition: { pg: string; sql: string }): Promise<() => Promise<void>> {
    const db = svc.rollcall.db;
    const dialect = profileOf(db).name;
    if (dialect === 'postgres') await db.raw(`ALTER TABLE batches ADD CONSTRAINT injected CHECK (${condition.pg})`);
    else if (dialect === 'mysql') {
      await db.raw(`CREATE TRIGGER injected BEFORE UPDATE ON batches FOR EACH ROW
        BEGIN IF ${condition.sql} THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected failure'; END IF; END`);
    } else await db.raw(`CREATE TRIGGER injected BEFORE UPDATE ON batches WHEN ${condition.sql} BEGIN SELECT RAISE(ABORT, 'injected failure'); END`);
    return async () => {
      await db.raw(dialect === 'postgres' ? 'ALTER TABLE batches DROP CONSTRAINT injected' : 'DROP TRIGGER injected');
    };
  }

  it('when a merged transaction fails for what its calls hold, then each call runs alone: those that can commit do, the rest get the error', async () => {
    const { id, ids } = await sealed(40);
    // Refuses any transaction that takes the batch past five acked items.
    const restore = await refuseBatchUpdates({ pg: 'succeeded <= 5', sql: 'NEW.succeeded > 5' });
    const before = { ...svc.rollcall.committer!.stats };
    const results = await Promise.all(ids.slice(0, 20).map((itemId) => svc.api.post('/v1/acks').send({ ids: [itemId] })));
    expect(svc.rollcall.committer!.stats.calls - before.calls).toBe(20);
    const failed = results.filter((r) => r.status === 500);
    for (const r of failed) expect(r.body).toEqual({ error: { code: 'internal', message: 'internal error' } });
    // Merged, the first round past five items failed whole; alone, five single-item calls commit.
    expect(results.filter((r) => r.status === 200).map((r) => r.body.acked)).toEqual([1, 1, 1, 1, 1]);
    expect(failed).toHaveLength(15);
    expect((await svc.api.get(`/v1/batches/${id}`)).body.succeeded).toBe(5);

    await restore();
    const retry = await svc.api.post('/v1/acks').send({ ids });
    expect(retry.body.acked).toBe(35);
    expect(retry.body.completed).toHaveLength(1);
  });

  it("when one batch's transaction cannot commit, then acks of other batches merged with it still commit", async () => {
    const poisoned = await sealed(1);
    const healthy = await Promise.all(Array.from({ length: 8 }, () => sealed(5)));
    const restore = await refuseBatchUpdates({ pg: `id <> '${poisoned.id}' OR succeeded = 0`, sql: `NEW.id = '${poisoned.id}' AND NEW.succeeded > 0` });
    const calls = [{ ids: poisoned.ids }, ...healthy.flatMap((b) => b.ids.map((itemId) => ({ ids: [itemId] })))];
    const before = { ...svc.rollcall.committer!.stats };
    const results = await Promise.all(
      shuffled(calls, 3).map((body) =>
        svc.api
          .post('/v1/acks')
          .send(body)
          .then((res) => ({ body, res })),
      ),
    );
    expect(svc.rollcall.committer!.stats.calls - before.calls).toBe(41);
    for (const { body, res } of results) expect([body.ids[0], res.status]).toEqual([body.ids[0], body.ids[0] === poisoned.ids[0] ? 500 : 200]);
    for (const b of healthy) expect((await svc.api.get(`/v1/batches/${b.id}`)).body).toMatchObject({ state: 'complete', succeeded: 5 });
    await restore();
    expect((await svc.api.post('/v1/acks').send({ ids: poisoned.ids })).body.completed).toHaveLength(1);
  });

  it('when a call arrives with no round running, then it starts at once, and the calls that come meanwhile share the next round', async () => {
    const { ids } = await sealed(30);
    // A window far longer than the test's time limit: a lone call that waited for it would never be answered.
    const committer = new AckCommitter(svc.rollcall.deps, {
      windowMs: 600_000,
      waitWhenIdle: false,
      maxIds: 20_000,
      concurrency: 1,
      maxQueuedIds: 100_000,
      maxQueuedIdsPerTenant: 100_000,
    });
    const lone = await committer.submit(callFromIds(ids.slice(0, 10), 'succeeded'));
    expect(lone.acked).toBe(10);
    expect(committer.stats).toEqual({ transactions: 1, calls: 1, ids: 10 });
    await new Promise(setImmediate); // the answered round leaves the committer after its callers resume

    const first = committer.submit(callFromIds(ids.slice(10, 20), 'succeeded'));
    const behind = [committer.submit(callFromIds(ids.slice(20, 25), 'succeeded')), committer.submit(callFromIds(ids.slice(25), 'succeeded'))];
    const results = await Promise.all([first, ...behind]);
    expect(results.map((r) => r.acked)).toEqual([10, 5, 5]);
    expect(results.reduce((n, r) => n + r.completed.length, 0)).toBe(1);
    expect(committer.stats).toEqual({ transactions: 3, calls: 4, ids: 30 });
  });

  it('when group commit is off, then each call runs alone with the same results', async () => {
    const off = await startService(backend, { ACK_GROUP_COMMIT: 'off' });
    try {
      expect(off.rollcall.committer).toBeNull();
      const { ids } = await batchWith(off.client, 30);
      const results = await Promise.all(ids.map((x) => off.api.post('/v1/acks').send({ ids: [x, x] })));
      expect(results.reduce((n, r) => n + r.body.acked, 0)).toBe(30);
      expect(results.reduce((n, r) => n + r.body.duplicates, 0)).toBe(30);
      expect(results.reduce((n, r) => n + r.body.completed.length, 0)).toBe(1);
    } finally {
      await off.stop();
    }
  });
});
