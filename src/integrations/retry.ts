import { RollcallApiError } from '../client';

/**
 * Tries, waiting 50 ms, 100 ms, … (capped at 2 s) between them: 1.55 s of waiting in all at the
 * default, plus each try's own time, up to the client's `timeoutMs` when the service does not answer.
 */
export interface RetryPolicy {
  attempts: number;
  firstDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 6, firstDelayMs: 50 };

/**
 * Whether a failed call may succeed when sent again: a network error or time-out, `429`, or a `5xx`
 * (`503` is what the service answers while its database is away). A `4xx` answer will not change.
 */
export function isTransient(error: unknown): boolean {
  if (error instanceof RollcallApiError) return error.status === 429 || error.status >= 500;
  return true;
}

/**
 * Runs `call` until it succeeds, the error is not transient, or the attempts are spent. Only for
 * calls that are safe to repeat: acks (a repeat is a duplicate) and adds with an Idempotency-Key.
 */
export async function withRetries<T>(call: () => Promise<T>, policy: RetryPolicy = DEFAULT_RETRY): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      if (attempt >= policy.attempts || !isTransient(error)) throw error;
      const delay = Math.min(2000, policy.firstDelayMs * 2 ** (attempt - 1));
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}
