/**
 * `task` with at most one run under way. A call while one runs waits for it, then for one more run,
 * which every call that came meanwhile shares: each caller's answer comes from a run that started
 * after its call, and callers arriving together cost two runs, not one each.
 */
export function oneAtATime<T>(task: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | null = null;
  let next: Promise<T> | null = null;
  const start = (): Promise<T> => {
    // Through a promise, so a task that throws before its first await rejects as any other.
    const run: Promise<T> = Promise.resolve()
      .then(task)
      .finally(() => {
        if (running === run) running = null;
      });
    running = run;
    return run;
  };
  return () => {
    if (next) return next;
    if (!running) return start();
    const after: Promise<T> = running
      .catch(() => undefined)
      .then(() => {
        next = null;
        return start();
      });
    next = after;
    return after;
  };
}
