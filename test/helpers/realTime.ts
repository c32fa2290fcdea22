/**
 * For tests that run a unit on jest's fake clock while it talks to a real database: the database's
 * I/O still takes real time, so these wait on the real clock, which the fake one does not replace.
 */
const realSetTimeout = globalThis.setTimeout;

/** Fakes the timers the units use (setTimeout, setInterval), leaving what drivers' I/O needs real. */
export function useFakeTimers(): void {
  jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'clearImmediate', 'queueMicrotask', 'hrtime', 'performance', 'Date'] });
}

/** Waits `ms` of real time, however far the fake clock is. */
export const realSleep = (ms: number) => new Promise<void>((resolve) => realSetTimeout(resolve, ms));

/** Resolves once `condition` holds, checked every 5 ms of real time; throws after `limitMs`. */
export async function until(condition: () => boolean | Promise<boolean>, limitMs = 10_000): Promise<void> {
  for (let waited = 0; !(await condition()); waited += 5) {
    if (waited > limitMs) throw new Error(`condition not reached in ${limitMs} ms`);
    await realSleep(5);
  }
}

export interface Tracked<T> {
  promise: Promise<T>;
  settled: boolean;
  value?: T;
  error?: unknown;
}

/** Follows a promise so a test can ask whether it has been answered yet without awaiting it. */
export function track<T>(promise: Promise<T>): Tracked<T> {
  const tracked: Tracked<T> = { promise, settled: false };
  promise.then(
    (value) => Object.assign(tracked, { settled: true, value }),
    (error: unknown) => Object.assign(tracked, { settled: true, error }),
  );
  return tracked;
}
