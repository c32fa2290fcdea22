import { Knex } from 'knex';
import { UnavailableError, toError } from '../domain/errors';
import { Db, dialectOf } from './db';
import { isRetryable, isUnavailable } from './dbErrors';

export interface TransactionOptions {
  /** How many times a transaction aborted by a deadlock or lock timeout is run again. */
  retries: number;
  /** Called once per retry, for metrics and logs. */
  onRetry?: (error: Error, attempt: number) => void;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `work` in a transaction, again from the start when the database aborted it for a deadlock
 * or lock-wait timeout (bounded by `retries`). `work` must compute everything from what it reads
 * inside the transaction, so a retry sees fresh rows. A database that does not answer becomes
 * UnavailableError.
 */
export function inTransaction<T>(db: Db, options: TransactionOptions, work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  return withRetries(options, () =>
    db.transaction(async (trx) => {
      if (dialectOf(trx) === 'sqlite') await claimSqliteWriteLock(trx);
      return work(trx);
    }),
  );
}

/**
 * Runs one attempt of a transaction, and again after a deadlock or lock-wait timeout (bounded by
 * `retries`, with a short random pause). A database that does not answer becomes UnavailableError.
 */
export async function withRetries<T>(options: TransactionOptions, attempt: () => Promise<T>): Promise<T> {
  for (let retry = 0; ; retry++) {
    try {
      return await attempt();
    } catch (caught) {
      const error = toError(caught);
      if (isRetryable(error) && retry < options.retries) {
        options.onRetry?.(error, retry + 1);
        await sleep(Math.random() * 5 * (retry + 1));
        continue;
      }
      throw asUnavailable(error);
    }
  }
}

/** Maps a "database does not answer" error to UnavailableError and passes every other error through. */
export function asUnavailable(error: Error): Error {
  return isUnavailable(error) ? new UnavailableError('the database is not available', { cause: error }) : error;
}

/**
 * knex opens SQLite transactions as DEFERRED; a write statement that matches nothing takes the
 * write lock up front (like BEGIN IMMEDIATE), so two processes on one file wait for each other
 * (busy_timeout) instead of failing when a reader tries to become a writer.
 */
async function claimSqliteWriteLock(trx: Knex.Transaction): Promise<void> {
  await trx.raw('DELETE FROM batches WHERE 0');
}
