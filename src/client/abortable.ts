/** Waiting that an AbortSignal can end: the client's waits, and the failure watch's look-back. */

/**
 * `work`'s outcome, or the signal's reason (as `errorOf` makes it an error) once it aborts first
 * (`work` is then left to settle on its own, its failure handled). Not a race against one promise
 * kept for the signal's life: each race would stay among that promise's reactions, holding its
 * result (a page of failed jobs, their data with them) until the signal aborts, weeks later. Here
 * the abort listener goes as soon as `work` settles, and nothing is kept.
 */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal, errorOf: (reason: unknown) => unknown = (reason) => reason): Promise<T> {
  if (signal.aborted) {
    work.catch(() => undefined); // no one waits for it now: its late failure (a closed connection) is no unhandled rejection
    return Promise.reject(errorOf(signal.reason));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(errorOf(signal.reason));
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/**
 * A request's end at its time limit, as Node's http reports it (and `httpSend` with it): an
 * `AbortError` whose `cause` is the limit signal's reason. One error for the limit, however the
 * request was sent.
 */
export function timeLimitError(reason: unknown): Error {
  return Object.assign(new Error('The operation was aborted', { cause: reason }), { name: 'AbortError', code: 'ABORT_ERR' });
}

/**
 * A signal that aborts when any of `signals` does, with its reason, until `release()`: then it
 * leaves them. AbortSignal.any does the first part, but keeps what it made among the sources'
 * dependents for as long as they live (a caller's signal reused for many waits), and came only in
 * Node 20.3.
 */
export function linkedSignal(...signals: AbortSignal[]): { signal: AbortSignal; release(): void } {
  const linked = new AbortController();
  const aborted = signals.find((signal) => signal.aborted);
  if (aborted) {
    linked.abort(aborted.reason);
    return { signal: linked.signal, release: () => undefined };
  }
  const listeners = signals.map((signal) => {
    const onAbort = () => linked.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    return () => signal.removeEventListener('abort', onAbort);
  });
  return { signal: linked.signal, release: () => listeners.forEach((remove) => remove()) };
}

/** Resolves after `ms`, or rejects with `signal`'s reason once it aborts. */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
