import { callFromIds } from '../../src/domain/ackCall';
import { AckCommitter } from '../../src/service/ackCommitter';
import { profileOf } from '../../src/store/dialect';
import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { shuffled, startService, TestService } from '../helpers/service';

describe.each(backends())('group commit of concurrent acks (%s)', (_name, backend) => {
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
    // running starts one at once, so merged rounds hold ~4 calls here, not all that were sent.
    expect(stats.transactions - before.transactions).toBeLessThan(calls.length / 3);

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

  it('when the merged transaction fails, then every merged caller gets the error and nothing applies', async () => {
    const { id, ids } = await sealed(40);
    const db = svc.rollcall.db;
    // A real database failure: a trigger (on PostgreSQL a check, which Citus also takes on a
    // distributed table) refuses any transaction that acks more than five items.
    if (profileOf(db).name === 'postgres') {
      await db.raw('ALTER TABLE batches ADD CONSTRAINT refuse_big_ack CHECK (succeeded <= 5)');
    } else if (profileOf(db).name === 'mysql') {
      await db.raw(`CREATE TRIGGER refuse_big_ack BEFORE UPDATE ON batches FOR EACH ROW
        BEGIN IF NEW.succeeded > 5 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected failure'; END IF; END`);
    } else {
      await db.raw(`CREATE TRIGGER refuse_big_ack BEFORE UPDATE ON batches WHEN NEW.succeeded > 5
        BEGIN SELECT RAISE(ABORT, 'injected failure'); END`);
    }
    const before = { ...svc.rollcall.committer!.stats };
    const results = await Promise.all(ids.slice(0, 20).map((itemId) => svc.api.post('/v1/acks').send({ ids: [itemId] })));
    const merged = svc.rollcall.committer!.stats.transactions - before.transactions;
    expect(merged).toBeLessThan(20);
    const failed = results.filter((r) => r.status === 500);
    expect(failed.length).toBeGreaterThan(5);
    for (const r of failed) expect(r.body).toEqual({ error: { code: 'internal', message: 'internal error' } });
    const answeredAcked = results.filter((r) => r.status === 200).reduce((n, r) => n + r.body.acked, 0);
    expect((await svc.api.get(`/v1/batches/${id}`)).body.succeeded).toBe(answeredAcked);

    await db.raw(profileOf(db).name === 'postgres' ? 'ALTER TABLE batches DROP CONSTRAINT refuse_big_ack' : 'DROP TRIGGER refuse_big_ack');
    const retry = await svc.api.post('/v1/acks').send({ ids });
    expect(retry.body.acked).toBe(40 - answeredAcked);
    expect(retry.body.completed).toHaveLength(1);
  });

  it('when a call arrives with no round running, then it starts at once, and the calls that come meanwhile share the next round', async () => {
    const { ids } = await sealed(30);
    // A window far longer than the test's time limit: a lone call that waited for it would never be answered.
    const committer = new AckCommitter(svc.rollcall.deps, { windowMs: 600_000, waitWhenIdle: false, maxIds: 20_000, concurrency: 1, maxQueuedIds: 100_000 });
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
