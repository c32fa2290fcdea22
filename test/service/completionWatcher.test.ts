import pino from 'pino';

import { callFromIds } from '../../src/domain/ackCall';
import { OPEN_CALLER } from '../../src/domain/batch';
import { ackItems } from '../../src/service/ackItems';
import { CompletionWatcher } from '../../src/service/completionWatcher';
import { ServiceDeps } from '../../src/service/deps';
import { openDb } from '../../src/store/db';
import { backends } from '../helpers/backends';
import { batchWith, TestBatch } from '../helpers/batches';
import { realSleep, track, until, useFakeTimers } from '../helpers/realTime';
import { startService, TestService } from '../helpers/service';

describe.each(backends())('the completion watcher on a fake clock (%s)', (_name, backend) => {
  let svc: TestService;
  let watcher: CompletionWatcher;
  let batch: TestBatch;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());
  beforeEach(async () => {
    batch = await batchWith(svc.client, 2);
  });
  afterEach(() => {
    watcher.close();
    jest.useRealTimers();
  });

  /** A watcher of its own on the real store; its waits are counted once they are registered. */
  async function waitFor(timeoutMs: number, pollIntervalMs: number) {
    watcher = new CompletionWatcher(svc.rollcall.deps, pollIntervalMs);
    const answer = track(watcher.wait(OPEN_CALLER, batch.id, timeoutMs, new AbortController().signal));
    await until(() => watcher.waiting === 1);
    return answer;
  }

  /** Acks every item of the batch; `deps.onCompleted` is what this process hears of the completion. */
  const completeBatch = (deps: ServiceDeps) => ackItems(deps, [callFromIds(batch.ids, 'succeeded')]);

  it('when this process completes the batch, then a wait answers at once, before any poll or deadline', async () => {
    useFakeTimers();
    const answer = await waitFor(30_000, 60_000);
    await completeBatch({ ...svc.rollcall.deps, onCompleted: (batches) => watcher.notify(batches) });
    await until(() => answer.settled);
    expect(answer.value).toMatchObject({ id: batch.id, state: 'complete', succeeded: 2, pending: 0 });
    expect(watcher.waiting).toBe(0);
  });

  it('when another replica completes the batch, then the wait answers at the next poll of the database', async () => {
    useFakeTimers();
    const answer = await waitFor(30_000, 1000);
    await completeBatch({ ...svc.rollcall.deps, onCompleted: undefined });
    await realSleep(100);
    expect(answer.settled).toBe(false); // no poll yet
    await jest.advanceTimersByTimeAsync(1000);
    await until(() => answer.settled);
    expect(answer.value).toMatchObject({ id: batch.id, state: 'complete', succeeded: 2 });
  });

  it('when the batch does not finish, then the wait answers at its deadline with the state then', async () => {
    useFakeTimers();
    const answer = await waitFor(5000, 60_000);
    // The deadline counts from the call, the first read's real time included (ms, here): 100 ms of slack.
    await jest.advanceTimersByTimeAsync(4900);
    await realSleep(100);
    expect(answer.settled).toBe(false);
    await jest.advanceTimersByTimeAsync(100);
    await until(() => answer.settled);
    expect(answer.value).toMatchObject({ id: batch.id, state: 'sealed', succeeded: 0, pending: 2 });
    expect(watcher.waiting).toBe(0);
  });

  it('when release() has run (a shutdown), then a wait that comes after answers at once with the state, holding nothing', async () => {
    watcher = new CompletionWatcher(svc.rollcall.deps, 60_000);
    watcher.release();
    const answer = track(watcher.wait(OPEN_CALLER, batch.id, 30_000, new AbortController().signal));
    await until(() => answer.settled, 5000);
    expect(answer.value).toMatchObject({ id: batch.id, state: 'sealed', pending: 2 });
    expect([watcher.waiting, watcher.holding]).toEqual([0, 0]);
  });

  it('when the caller goes away, then its wait ends without reading the batch again', async () => {
    watcher = new CompletionWatcher(svc.rollcall.deps, 60_000);
    const gone = new AbortController();
    const answer = track(watcher.wait(OPEN_CALLER, batch.id, 30_000, gone.signal));
    await until(() => watcher.waiting === 1);
    let reads = 0;
    const count = () => void (reads += 1);
    svc.rollcall.db.on('query', count);
    try {
      gone.abort();
      await until(() => answer.settled, 5000);
    } finally {
      svc.rollcall.db.off('query', count);
    }
    expect(reads).toBe(0);
    expect(watcher.holding).toBe(0);
  });
});

describe.each(backends())('the completion watcher when its polls fail (%s)', (_name, backend) => {
  it('then it says so in the log, once a minute at most, and the wait answers at its deadline', async () => {
    const svc = await startService(backend);
    const broken = openDb(svc.database.config);
    await broken.destroy();
    const said: Array<{ msg: string; waiting: number }> = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => void said.push(JSON.parse(line)) });
    const deps: ServiceDeps = { ...svc.rollcall.deps, log };
    const watcher = new CompletionWatcher(deps, 50);
    try {
      const batch = await batchWith(svc.client, 2);
      const answer = track(watcher.wait(OPEN_CALLER, batch.id, 1000, new AbortController().signal));
      await until(() => watcher.waiting === 1);
      const writable = deps as { db: ServiceDeps['db'] };
      writable.db = broken; // every poll fails meanwhile
      await realSleep(400);
      writable.db = svc.rollcall.deps.db; // the deadline's own read answers
      await until(() => answer.settled, 5_000);
      expect(answer.value).toMatchObject({ id: batch.id, state: 'sealed' });
      expect(said.map(({ msg, waiting }) => ({ msg, waiting }))).toEqual([{ msg: expect.stringContaining('the wait poll failed'), waiting: 1 }]);
    } finally {
      watcher.close();
      await svc.stop();
    }
  });
});
