import fc from 'fast-check';

import { FailedSet, MAX_RECOVERY_READS, recentFailuresOf, RECOVERY_PAGE } from '../../src/integrations/bullmqRecentFailures';

interface TestJob {
  id: string;
  finishedOn?: number;
}

/** What other processes do to the failed set at one moment: remove or retry jobs the look-back read (or any), add new failures. */
interface Change {
  removeRead: number;
  retryRead: number;
  removeAny: number;
  add: number;
}

const NO_CHANGE: Change = { removeRead: 0, retryRead: 0, removeAny: 0, add: 0 };

/**
 * A failed set as Redis keeps BullMQ's: members ordered by score (finishedOn) newest first, equal
 * scores by ID in reverse byte order (ZREVRANGE), and the jobs' hashes beside it. Before each read
 * of IDs and each load of jobs, `changeAt(n)` says what others change first (the n-th call).
 */
class TestFailedSet implements FailedSet<TestJob> {
  private members: Array<{ id: string; score: number }> = [];
  private readonly hashes = new Map<string, TestJob>();
  /** IDs the look-back was handed by idsAt. */
  readonly listed = new Set<string>();
  /** IDs some change removed or retried: not in the set for the whole look-back. */
  readonly touched = new Set<string>();
  private calls = 0;
  private nextId: number;
  private now: number;

  constructor(
    scores: number[],
    private readonly changeAt: (call: number) => Change = () => NO_CHANGE,
  ) {
    scores.forEach((score, i) => this.insert(String(i + 1), score, false));
    this.sort();
    this.nextId = scores.length + 1;
    this.now = Math.max(0, ...scores) + 1;
  }

  /** The jobs in the set now. */
  ids(): string[] {
    return this.members.map((m) => m.id);
  }

  async idsAt(start: number, end: number): Promise<string[]> {
    this.change(this.changeAt(this.calls++));
    const ids = this.members.slice(start, end + 1).map((m) => m.id);
    for (const id of ids) this.listed.add(id);
    return ids;
  }

  async jobsOf(ids: string[]): Promise<Array<TestJob | undefined>> {
    this.change(this.changeAt(this.calls++));
    return ids.map((id) => {
      const job = this.hashes.get(id);
      return job && { ...job };
    });
  }

  private insert(id: string, score: number, sorted = true): void {
    this.hashes.set(id, { id, finishedOn: score });
    this.members.push({ id, score });
    if (sorted) this.sort();
  }

  private sort(): void {
    this.members.sort((a, b) => b.score - a.score || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
  }

  private take(count: number, pool: (id: string) => boolean, retry: boolean): void {
    for (const { id } of this.members.filter((m) => pool(m.id)).slice(0, count)) {
      this.members = this.members.filter((m) => m.id !== id);
      this.touched.add(id);
      if (retry) delete this.hashes.get(id)!.finishedOn;
      else this.hashes.delete(id);
    }
  }

  private change({ removeRead, retryRead, removeAny, add }: Change): void {
    this.take(removeRead, (id) => this.listed.has(id), false);
    this.take(retryRead, (id) => this.listed.has(id), true);
    // Spread over the set: every third member from the newest.
    this.take(removeAny, (id) => Number(id) % 3 === 0, false);
    for (let i = 0; i < add; i++) this.insert(String(this.nextId++), this.now++, false);
    this.sort();
  }
}

async function readAll(set: TestFailedSet, since: number): Promise<{ pages: TestJob[][]; error?: Error }> {
  const pages: TestJob[][] = [];
  try {
    for await (const page of recentFailuresOf(set, since)) pages.push(page);
    return { pages };
  } catch (error) {
    return { pages, error: error as Error };
  }
}

/** Scores 1 … count, `tie` jobs to a score (failures of one millisecond), oldest first. */
const scores = (count: number, tie = 1) => Array.from({ length: count }, (_, i) => 1 + Math.floor(i / tie));

/** The change before every read of IDs but the first (calls 2, 4, …: idsAt and jobsOf alternate). */
const beforeEveryRead = (change: Change) => (call: number) => (call % 2 === 0 && call > 0 ? change : NO_CHANGE);

/** Reads `set` from the start (since 0) and expects no error and every job still in it handed. */
async function expectEveryJobLeftRead(set: TestFailedSet): Promise<void> {
  const { pages, error } = await readAll(set, 0);
  expect(error).toBeUndefined();
  const handed = new Set(pages.flat().map((job) => job.id));
  for (const id of set.ids()) expect(handed.has(id)).toBe(true);
}

describe('the failure watch look-back reads the recent failures of a changing failed set', () => {
  it('when nothing changes, then every failure since `since` is handed once, newest first, and the older ones are not', async () => {
    for (const count of [0, 1, 199, 200, 201, 399, 400, 1000]) {
      const set = new TestFailedSet(scores(count));
      const since = Math.floor(count / 4);
      const { pages, error } = await readAll(set, since);
      expect(error).toBeUndefined();
      const handed = pages.flat().map((job) => job.finishedOn);
      expect(handed).toEqual(
        scores(count)
          .filter((score) => score >= since)
          .reverse(),
      );
    }
  });

  it('when the jobs read are removed or retried between pages, then no older failure is skipped', async () => {
    // 30 of the jobs read leave before the second read: more than a page reaches back.
    const set = new TestFailedSet(scores(450), (call) => (call === 2 ? { ...NO_CHANGE, removeRead: 20, retryRead: 10 } : NO_CHANGE));
    const { pages, error } = await readAll(set, 0);
    expect(error).toBeUndefined();
    expect(pages.flat()).toHaveLength(450);
  });

  it('when a job is retried after its ID was read and before the job was loaded, then it is left out and the reading goes on', async () => {
    const set = new TestFailedSet(scores(450), (call) => (call === 1 ? { ...NO_CHANGE, retryRead: 1 } : NO_CHANGE));
    const { pages, error } = await readAll(set, 0);
    expect(error).toBeUndefined();
    expect(pages.flat()).toHaveLength(449);
  });

  it('when a job is removed after its ID was read and before the job was loaded, then the reading goes on past that page', async () => {
    const set = new TestFailedSet(scores(450), (call) => (call === 1 ? { ...NO_CHANGE, removeRead: 1 } : NO_CHANGE));
    const { pages, error } = await readAll(set, 0);
    expect(error).toBeUndefined();
    expect(pages.flat()).toHaveLength(449);
  });

  it('when one job read leaves the set before every read of 10,000, then all are read within the pages allowed', async () => {
    await expectEveryJobLeftRead(new TestFailedSet(scores(10_000), beforeEveryRead({ ...NO_CHANGE, removeRead: 1 })));
  });

  it('when more jobs read leave the set before every read than a page first reaches back (a retry of the newest, one by one), then all the others are read within the pages allowed', async () => {
    await expectEveryJobLeftRead(new TestFailedSet(scores(9000), beforeEveryRead({ ...NO_CHANGE, retryRead: 60 })));
  });

  it('when more new failures than a page arrive before every read, then it ends with an error, not reading for ever', async () => {
    const set = new TestFailedSet(scores(1000), beforeEveryRead({ ...NO_CHANGE, add: RECOVERY_PAGE + 50 }));
    const { error } = await readAll(set, 0);
    expect(error?.message).toMatch(`${MAX_RECOVERY_READS} pages`);
  });

  it('whatever others remove, retry or add meanwhile, each failure in the set throughout is handed exactly once, none twice, none older than `since`', async () => {
    const change = fc.record({
      removeRead: fc.nat(30),
      retryRead: fc.nat(5),
      removeAny: fc.nat(10),
      add: fc.nat(60),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 1200 }),
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 0, max: 400 }),
        fc.array(fc.oneof({ weight: 3, arbitrary: fc.constant(NO_CHANGE) }, { weight: 1, arbitrary: change }), { maxLength: 40 }),
        async (count, tie, since, changes) => {
          const initial = scores(count, tie);
          const set = new TestFailedSet(initial, (call) => changes[call] ?? NO_CHANGE);
          const { pages, error } = await readAll(set, since);
          const handed = pages.flat();
          const ids = handed.map((job) => job.id);
          expect(new Set(ids).size).toBe(ids.length);
          for (const job of handed) expect(job.finishedOn).toBeGreaterThanOrEqual(since);
          if (error) return; // moved too much: reported, not skipped silently
          const handedIds = new Set(ids);
          initial.forEach((score, i) => {
            const id = String(i + 1);
            if (score >= since && !set.touched.has(id)) expect([id, handedIds.has(id)]).toEqual([id, true]);
          });
        },
      ),
      { numRuns: 200 },
    );
  });
});
