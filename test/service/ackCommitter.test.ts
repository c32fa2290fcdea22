import { Knex } from 'knex';

import { callFromIds } from '../../src/domain/ackCall';
import { OPEN_CALLER, Outcome } from '../../src/domain/batch';
import { AckCommitter, AckMergeOptions } from '../../src/service/ackCommitter';
import type { AckResult } from '../../src/service/ackItems';
import { getBatch } from '../../src/service/readBatches';
import { openDb } from '../../src/store/db';
import { backends, describeEachOrSkip, serverBackends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { realSleep, track, Tracked, until, useFakeTimers } from '../helpers/realTime';
import { holdBatchRow, otherConnections } from '../helpers/rowLocks';
import { startService, TestService } from '../helpers/service';

// waitWhenIdle: the window's own rules (a lone call that starts at once is test/api/groupCommit's).
const MERGING: AckMergeOptions = { windowMs: 50, waitWhenIdle: true, maxIds: 10_000, concurrency: 1, maxQueuedIds: 100_000, maxQueuedIdsPerTenant: 100_000 };

/** The real committer on the service's real store, with these merge settings; `rounds` lists each round's call count. */
function committerOn(svc: TestService, options: Partial<AckMergeOptions>, deps = svc.rollcall.deps) {
  const rounds: number[] = [];
  const committer = new AckCommitter(deps, { ...MERGING, ...options }, (calls) => rounds.push(calls));
  return { committer, rounds };
}

const ack = (ids: string[], outcome: Outcome = 'succeeded') => callFromIds(ids, outcome);

describe.each(backends())('the ack committer on a fake clock (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());
  afterEach(() => jest.useRealTimers());

  const stateOf = (id: string) => getBatch(svc.rollcall.deps, OPEN_CALLER, id);

  it('when calls arrive within the window, then one transaction answers each its own result, after commit', async () => {
    const batches = [await batchWith(svc.client, 2), await batchWith(svc.client, 3), await batchWith(svc.client, 1)];
    useFakeTimers();
    const { committer, rounds } = committerOn(svc, {});
    // What each caller would see if it read its batch the moment it is answered.
    const seenWhenAnswered = batches.map((b) => track(committer.submit(ack(b.ids)).then(async (result) => ({ result, batch: await stateOf(b.id) }))));
    await jest.advanceTimersByTimeAsync(49);
    await realSleep(50);
    expect(seenWhenAnswered.filter((s) => s.settled)).toEqual([]);
    expect((await stateOf(batches[0]!.id)).succeeded).toBe(0);
    await jest.advanceTimersByTimeAsync(1);
    const seen = await Promise.all(seenWhenAnswered.map((s) => s.promise));
    expect(rounds).toEqual([3]);
    seen.forEach(({ result, batch }, i) => {
      const { id, ids } = batches[i]!;
      expect(result).toMatchObject({ acked: ids.length, duplicates: 0, rejected: [], completed: [expect.objectContaining({ id })] });
      expect(result.completed).toHaveLength(1);
      expect(batch).toMatchObject({ state: 'complete', succeeded: ids.length, pending: 0 });
    });
  });

  it('when the waiting calls reach the most IDs a round takes, then it starts before the window ends', async () => {
    const batch = await batchWith(svc.client, 4);
    useFakeTimers();
    const { committer, rounds } = committerOn(svc, { windowMs: 60_000, maxIds: 4 });
    const answers = [track(committer.submit(ack(batch.ids.slice(0, 2)))), track(committer.submit(ack(batch.ids.slice(2))))];
    await until(() => answers.every((a) => a.settled));
    expect(answers.map((a) => a.value?.acked)).toEqual([2, 2]);
    expect(rounds).toEqual([2]);
  });

  it('when more IDs would wait than the queue bound, then that call is refused at once and applies nothing', async () => {
    const batch = await batchWith(svc.client, 6);
    useFakeTimers();
    const { committer } = committerOn(svc, { maxQueuedIds: 5 });
    const first = track(committer.submit(ack(batch.ids.slice(0, 3))));
    const refused = track(committer.submit(ack(batch.ids.slice(3))));
    await realSleep(20);
    expect(refused.settled).toBe(true);
    expect(refused.error).toMatchObject({ code: 'unavailable', status: 503 });
    expect(committer.waitingIds).toBe(3);
    await jest.advanceTimersByTimeAsync(50);
    expect(await first.promise).toMatchObject({ acked: 3 });
    expect(await stateOf(batch.id)).toMatchObject({ succeeded: 3, pending: 3 });
  });

  it('when a round fails, then every call merged into it gets an error (after running again alone) and nothing is applied', async () => {
    const batches = [await batchWith(svc.client, 2), await batchWith(svc.client, 2)];
    const gone = openDb(svc.database.config);
    await gone.destroy(); // the database is out of reach for this committer
    useFakeTimers();
    const { committer, rounds } = committerOn(svc, {}, { ...svc.rollcall.deps, db: gone });
    const answers = [...batches.map((b) => track(committer.submit(ack(b.ids)))), track(committer.submit(ack([batches[0]!.ids[0]!])))];
    await jest.advanceTimersByTimeAsync(50);
    await until(() => answers.every((a) => a.settled));
    expect(rounds).toEqual([3]);
    const [error] = answers.map((a) => a.error);
    expect(error).toBeInstanceOf(Error);
    // Not a 503 (a pool this process destroyed), so each call ran again alone, and failed alike.
    for (const answer of answers) expect(answer.error).toEqual(error);
    for (const b of batches) expect(await stateOf(b.id)).toMatchObject({ succeeded: 0, pending: 2 });
  });
});

const servers = serverBackends();
const describeOnServers = describeEachOrSkip(servers);

describeOnServers('the ack committer with a batch row held by another connection (%s)', (_name, backend) => {
  let svc: TestService;
  let holder: Knex;
  beforeAll(async () => {
    svc = await startService(backend, { LOCK_TIMEOUT: '20s' });
    holder = otherConnections(svc.database, 2);
  });
  afterAll(async () => {
    await holder.destroy();
    await svc.stop();
  });
  afterEach(() => jest.useRealTimers());

  const holdRow = (id: string) => holdBatchRow(holder, id);

  it('when every slot waits on a held batch, then an ack of a free batch waits for a slot, not a new one', async () => {
    const [a, b, c] = [await batchWith(svc.client, 1), await batchWith(svc.client, 1), await batchWith(svc.client, 1)];
    const releases = [await holdRow(a.id), await holdRow(b.id)];
    try {
      useFakeTimers();
      const { committer, rounds } = committerOn(svc, { windowMs: 0, concurrency: 2 });
      const answers = [a, b, c].map((batch) => track(committer.submit(ack(batch.ids))));
      await until(() => rounds.length === 2); // both slots taken by the held batches
      await realSleep(100); // time for a third round, were one to start
      expect(answers.map((x) => x.settled)).toEqual([false, false, false]);
      expect(rounds).toEqual([1, 1]);
      await releases[0]!();
      await until(() => answers[2]!.settled);
      expect(answers[2]!.value).toMatchObject({ acked: 1 });
      expect(answers[1]!.settled).toBe(false);
    } finally {
      for (const release of releases) await release();
    }
  });

  it('when a batch is held, then its later ack waits behind its first while other batches commit', async () => {
    const [a, c] = [await batchWith(svc.client, 1), await batchWith(svc.client, 1)];
    const release = await holdRow(a.id);
    try {
      useFakeTimers();
      const { committer, rounds } = committerOn(svc, { windowMs: 0, concurrency: 3 });
      const answered: string[] = [];
      const follow = (label: string, outcome: Outcome, ids: string[]) =>
        track(committer.submit(ack(ids, outcome)).then((result) => (answered.push(label), result)));
      const first = follow('first', 'succeeded', a.ids);
      const retry = follow('retry', 'failed', a.ids); // a late failure report of the same item
      const other = follow('other', 'succeeded', c.ids);
      await until(() => other.settled);
      await realSleep(200);
      expect(rounds).toEqual([1, 1]);
      expect([first.settled, retry.settled]).toEqual([false, false]);
      await release();
      await until(() => first.settled && retry.settled);
      expect(answered).toEqual(['other', 'first', 'retry']);
      expect(first.value).toMatchObject({ acked: 1 });
      expect(retry.value).toMatchObject({ acked: 0, duplicates: 1 });
      expect(await getBatch(svc.rollcall.deps, OPEN_CALLER, a.id)).toMatchObject({ succeeded: 1, failed: 0 });
    } finally {
      await release();
    }
  });
});

describeOnServers('the ack committer when a round waits in vain for a batch row held by another connection (%s)', (_name, backend) => {
  let svc: TestService;
  let holder: Knex;
  beforeAll(async () => {
    svc = await startService(backend, { LOCK_TIMEOUT: '1s' });
    holder = otherConnections(svc.database, 2);
  });
  afterAll(async () => {
    await holder.destroy();
    await svc.stop();
  });

  /** Calls submitted in one turn behind a round in flight (of batch `busy`): they meet in the next round. */
  function submitBehind(committer: AckCommitter, busy: string[], calls: string[][]) {
    const first = track(committer.submit(ack(busy)));
    return [first, ...calls.map((ids) => track(committer.submit(ack(ids))))];
  }

  it('when a batch was found held, then its next calls do not share a round with other batches: those commit at once', async () => {
    const [x, y, z] = [await batchWith(svc.client, 3), await batchWith(svc.client, 3), await batchWith(svc.client, 3)];
    const release = await holdBatchRow(holder, x.id);
    try {
      const { committer, rounds } = committerOn(svc, { windowMs: 50, waitWhenIdle: false, concurrency: 2 });
      await expect(committer.submit(ack([x.ids[0]!]))).rejects.toMatchObject({ code: 'unavailable' });
      await realSleep(20); // that round has left the committer: the next call starts at once
      const started = Date.now();
      const [ofZ, ofX, ofY] = submitBehind(committer, [z.ids[0]!], [[x.ids[1]!], [y.ids[0]!]]);
      await until(() => ofY!.settled);
      expect([ofY!.value, Date.now() - started < 500]).toEqual([expect.objectContaining({ acked: 1 }), true]);
      expect(ofZ!.value).toMatchObject({ acked: 1 });
      expect(ofX!.settled).toBe(false);
      await until(() => ofX!.settled);
      expect(ofX!.error).toMatchObject({ code: 'unavailable' });
      expect(rounds).toEqual([1, 1, 1, 1]);
    } finally {
      await release();
    }
  });

  it('when a merged round fails and its calls run alone, then one that finds its batch held answers the later calls of that batch at once, and a batch done with is let go', async () => {
    const [s, x, y] = [await batchWith(svc.client, 12), await batchWith(svc.client, 4), await batchWith(svc.client, 2)];
    await holder.raw('select 1'); // its connection open: taking the row below is one statement
    // The merged round fails for a reason of its own: the clock its decision reads fails. That read
    // comes under the round's locks, so X is held only from then on, by another connection; until
    // it is, every transaction fails alike (S's calls, run first alone, give it that time). Then a
    // call of X and one of Y come, and wait in the queue behind the round.
    let holding = false;
    let release = async () => undefined as void;
    let queued: { ofX: Tracked<AckResult>; ofY: Tracked<AckResult> } | undefined;
    const now = () => {
      if (holding) return svc.rollcall.deps.now();
      if (!queued) {
        void holdBatchRow(holder, x.id).then((letGo) => ((release = letGo), (holding = true)));
        queued = { ofX: track(committer.submit(ack([x.ids[3]!]))), ofY: track(committer.submit(ack([y.ids[1]!]))) };
      }
      throw new Error('the clock failed');
    };
    // A short window: the queued calls' own timer has fired, in vain, before Y is let go.
    const { committer } = committerOn(svc, { windowMs: 5, waitWhenIdle: true, concurrency: 2 }, { ...svc.rollcall.deps, now });
    try {
      const calls = [...s.ids.map((id) => [id]), [y.ids[0]!], [x.ids[0]!], [x.ids[1]!], [x.ids[2]!]];
      const [ofY, x1, x2, x3] = calls.map((ids) => track(committer.submit(ack(ids)))).slice(s.ids.length);
      await until(() => ofY!.settled);
      expect([ofY!.error, ofY!.value]).toEqual([undefined, expect.objectContaining({ acked: 1 })]); // else X was taken too late: S's calls did not give it the time
      // While X's first call waits for its lock (LOCK_TIMEOUT 1 s), the call of Y queued behind the round does not wait for it.
      await until(() => queued!.ofY.settled);
      expect([queued!.ofY.value, x1!.settled]).toEqual([expect.objectContaining({ acked: 1 }), false]);
      await until(() => x1!.settled);
      const transactions = committer.stats.transactions;
      await realSleep(100); // not another LOCK_TIMEOUT (1 s)
      expect([x2, x3, queued!.ofX].map((answer) => answer!.settled)).toEqual([true, true, true]);
      for (const answer of [x1, x2, x3, queued!.ofX]) expect(answer!.error).toMatchObject({ code: 'unavailable' });
      expect(committer.stats.transactions).toBe(transactions); // X's other calls did not wait a LOCK_TIMEOUT each
    } finally {
      await release();
    }
  });

  it('when calls of two held batches wait, then they take one slot at a time: a call of a free batch gets the other', async () => {
    const [x, w, y] = [await batchWith(svc.client, 3), await batchWith(svc.client, 3), await batchWith(svc.client, 3)];
    const releases = [await holdBatchRow(holder, x.id), await holdBatchRow(holder, w.id)];
    try {
      const { committer } = committerOn(svc, { windowMs: 50, waitWhenIdle: false, concurrency: 2 });
      const found = [committer.submit(ack([x.ids[0]!])), committer.submit(ack([w.ids[0]!]))];
      for (const answer of found) await expect(answer).rejects.toMatchObject({ code: 'unavailable' });
      await realSleep(20);
      const started = Date.now();
      const [ofX, ofW, ofY] = [[x.ids[1]!], [w.ids[1]!], [y.ids[0]!]].map((ids) => track(committer.submit(ack(ids))));
      await until(() => ofY!.settled);
      expect([ofY!.value, Date.now() - started < 500]).toEqual([expect.objectContaining({ acked: 1 }), true]);
      await until(() => ofX!.settled && ofW!.settled);
      expect([ofX!.error, ofW!.error]).toEqual([expect.objectContaining({ code: 'unavailable' }), expect.objectContaining({ code: 'unavailable' })]);
    } finally {
      for (const release of releases) await release();
    }
  });

  it('when one of two held batches is let go, then its calls run again and commit, and calls of the one still held get 503 at once', async () => {
    const [x, w, z] = [await batchWith(svc.client, 5), await batchWith(svc.client, 5), await batchWith(svc.client, 5)];
    const [releaseX, releaseW] = [await holdBatchRow(holder, x.id), await holdBatchRow(holder, w.id)];
    try {
      const { committer, rounds } = committerOn(svc, { windowMs: 50, waitWhenIdle: false, concurrency: 2 });
      const found = [committer.submit(ack([x.ids[0]!])), committer.submit(ack([w.ids[0]!]))];
      for (const answer of found) await expect(answer).rejects.toMatchObject({ code: 'unavailable' });
      await releaseW();
      await realSleep(20);
      // W's and X's calls meet in one round of held batches, behind a round of Z.
      const [, ofW, ofX] = submitBehind(committer, [z.ids[0]!], [[w.ids[1]!], [x.ids[1]!]]);
      await until(() => rounds.length === 4); // Z's round, then W's and X's: the next call of X comes behind it
      const started = Date.now();
      const behind = track(committer.submit(ack([x.ids[2]!])));
      await until(() => ofW!.settled && ofX!.settled && behind.settled);
      expect(ofW!.value).toMatchObject({ acked: 1 });
      expect([ofX!.error, behind.error]).toEqual([expect.objectContaining({ code: 'unavailable' }), expect.objectContaining({ code: 'unavailable' })]);
      expect(Date.now() - started).toBeLessThan(1700); // with the round's 503, not after a wait of its own
      expect(rounds.slice(2)).toEqual([1, 2, 1]);
    } finally {
      await releaseX();
      await releaseW();
    }
  });

  it('when a call runs again after its round waited for a held batch, then it does not meet a second held batch not yet known: it commits', async () => {
    const [x, w, y, z] = [await batchWith(svc.client, 3), await batchWith(svc.client, 3), await batchWith(svc.client, 3), await batchWith(svc.client, 3)];
    const releases = [await holdBatchRow(holder, x.id), await holdBatchRow(holder, w.id)];
    try {
      const { committer, rounds } = committerOn(svc, { windowMs: 50, waitWhenIdle: false, concurrency: 1 });
      const [ofZ, ofX, ofY] = submitBehind(committer, [z.ids[0]!], [[x.ids[0]!], [y.ids[0]!]]);
      await until(() => rounds.length === 2); // X's and Y's round waits for X
      const ofW = track(committer.submit(ack([w.ids[0]!]))); // W's call waits behind it; W is not known to be held
      await until(() => ofX!.settled && ofY!.settled && ofW.settled);
      expect(ofZ!.value).toMatchObject({ acked: 1 });
      expect(ofY!.value).toMatchObject({ acked: 1 }); // before: merged with W's call, a second wait, and 503
      expect([ofX!.error, ofW.error]).toEqual([expect.objectContaining({ code: 'unavailable' }), expect.objectContaining({ code: 'unavailable' })]);
      expect(rounds).toEqual([1, 2, 1, 1]);
    } finally {
      for (const release of releases) await release();
    }
  });

  it('when a round of several batches waits in vain, then its calls of batches not held run again and commit; those of the held one get 503', async () => {
    const [w, v, z] = [await batchWith(svc.client, 3), await batchWith(svc.client, 3), await batchWith(svc.client, 3)];
    const release = await holdBatchRow(holder, w.id);
    try {
      const { committer, rounds } = committerOn(svc, { windowMs: 50, waitWhenIdle: false, concurrency: 2 });
      const [ofZ, ofW, ofV, ofBoth] = submitBehind(committer, [z.ids[0]!], [[w.ids[0]!], [v.ids[0]!], [w.ids[1]!, v.ids[1]!]]);
      await until(() => ofW!.settled && ofV!.settled && ofBoth!.settled);
      expect(ofZ!.value).toMatchObject({ acked: 1 });
      expect(ofV!.value).toMatchObject({ acked: 1 });
      expect([ofW!.error, ofBoth!.error]).toEqual([expect.objectContaining({ code: 'unavailable' }), expect.objectContaining({ code: 'unavailable' })]);
      expect(rounds).toEqual([1, 3, 1]);
    } finally {
      await release();
    }
    expect(await getBatch(svc.rollcall.deps, OPEN_CALLER, v.id)).toMatchObject({ succeeded: 1 });
    expect(await getBatch(svc.rollcall.deps, OPEN_CALLER, w.id)).toMatchObject({ succeeded: 0 });
  });
});
