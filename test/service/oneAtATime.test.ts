import { oneAtATime } from '../../src/service/oneAtATime';

/** A task whose runs the test ends one by one; each run answers with its number. */
function steppedTask() {
  const ends: Array<(error?: Error) => void> = [];
  let started = 0;
  const task = () =>
    new Promise<number>((resolve, reject) => {
      const run = ++started;
      ends.push((error) => (error ? reject(error) : resolve(run)));
    });
  return { task, ends, started: () => started };
}

/** Lets every promise callback queued so far run. */
const settled = () => new Promise((resolve) => setImmediate(resolve));

describe('oneAtATime', () => {
  it('when calls come while a run is under way, then they share one more run, which starts once that one ends', async () => {
    const { task, ends, started } = steppedTask();
    const run = oneAtATime(task);
    const first = run();
    const during = [run(), run(), run()];
    await settled();
    expect(started()).toBe(1);
    ends[0]!();
    expect(await first).toBe(1);
    await settled();
    expect(started()).toBe(2);
    const later = run(); // while the second runs: it waits for a third
    ends[1]!();
    expect(await Promise.all(during)).toEqual([2, 2, 2]);
    await settled();
    ends[2]!();
    expect(await later).toBe(3);
    expect(started()).toBe(3);
  });

  it('when a run fails, then its callers get its error and the calls that waited for it still get a run of their own', async () => {
    const { task, ends } = steppedTask();
    const run = oneAtATime(task);
    const first = run();
    const waiting = run();
    await settled();
    ends[0]!(new Error('the database is away'));
    await expect(first).rejects.toThrow('the database is away');
    await settled();
    ends[1]!();
    expect(await waiting).toBe(2);
    // Nothing under way: the next call starts at once.
    const alone = run();
    await settled();
    ends[2]!();
    expect(await alone).toBe(3);
  });

  it('when the task throws before its first await, then the caller gets a rejected promise, and the next call runs it again', async () => {
    let calls = 0;
    const run = oneAtATime((): Promise<number> => {
      calls += 1;
      if (calls === 1) throw new Error('thrown at once');
      return Promise.resolve(calls);
    });
    const first = run();
    expect(first).toBeInstanceOf(Promise);
    await expect(first).rejects.toThrow('thrown at once');
    expect(await run()).toBe(2);
  });
});
