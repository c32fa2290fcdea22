import pino from 'pino';

import { PeriodicTask } from '../../src/service/periodic';

/** Lets pending promise callbacks run (fake timers do not advance them). */
const settle = async () => {
  for (let i = 0; i < 5; i++) await Promise.resolve();
};

describe('a periodic task on a fake clock', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('when started, then it runs at once and again an interval after each run ends', async () => {
    let runs = 0;
    const task = new PeriodicTask('t', 1000, async () => void (runs += 1), pino({ level: 'silent' }));
    task.start();
    await jest.advanceTimersByTimeAsync(0);
    expect(runs).toBe(1);
    await jest.advanceTimersByTimeAsync(999);
    expect(runs).toBe(1);
    await jest.advanceTimersByTimeAsync(1);
    expect(runs).toBe(2);
    await task.stop();
  });

  it('when woken during a run, then it runs again right after, not an interval later; never two at once', async () => {
    let running = 0;
    let most = 0;
    let runs = 0;
    let finish!: () => void;
    const task = new PeriodicTask(
      't',
      60_000,
      () =>
        new Promise<void>((resolve) => {
          running += 1;
          most = Math.max(most, running);
          runs += 1;
          finish = () => {
            running -= 1;
            resolve();
          };
        }),
      pino({ level: 'silent' }),
    );
    task.start();
    await jest.advanceTimersByTimeAsync(0);
    task.wake();
    task.wake();
    await jest.advanceTimersByTimeAsync(10);
    expect(runs).toBe(1);
    finish();
    await settle();
    await jest.advanceTimersByTimeAsync(0);
    expect(runs).toBe(2);
    expect(most).toBe(1);
    finish();
    await settle();
    await task.stop();
  });

  it('when a run fails, then the task logs it and runs again after the interval', async () => {
    let runs = 0;
    const task = new PeriodicTask(
      't',
      500,
      async () => {
        runs += 1;
        if (runs === 1) throw new Error('database down');
      },
      pino({ level: 'silent' }),
    );
    task.start();
    await jest.advanceTimersByTimeAsync(0);
    await jest.advanceTimersByTimeAsync(500);
    expect(runs).toBe(2);
    await task.stop();
  });

  it('when stopped, then it waits for the run in progress and never runs again', async () => {
    let runs = 0;
    let finish!: () => void;
    const task = new PeriodicTask('t', 100, () => new Promise<void>((resolve) => ((runs += 1), (finish = resolve))), pino({ level: 'silent' }));
    task.start();
    await jest.advanceTimersByTimeAsync(0);
    let stopped = false;
    const stopping = task.stop().then(() => (stopped = true));
    await settle();
    expect(stopped).toBe(false);
    finish();
    await stopping;
    await jest.advanceTimersByTimeAsync(1000);
    expect(runs).toBe(1);
  });
});
