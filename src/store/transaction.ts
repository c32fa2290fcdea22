import path from 'node:path';

import { Knex } from 'knex';

import { CommitUnconfirmedError, LockHeldError, toError, UnavailableError } from '../domain/errors';
import { Db, perTransactionSettings } from './db';
import { isBusy, isLockTimeout, isRetryable, isUnavailable } from './dbErrors';
import { profileOf } from './dialect';

export interface TransactionOptions {
  /** How many times a transaction aborted by a deadlock or lock timeout is run again. */
  retries: number;
  /** Called once per retry, for metrics and logs. */
  onRetry?: (error: Error, attempt: number) => void;
  /** SQLite: a write transaction that waited this long for its turn in this process is not started (503). */
  lockTimeoutMs?: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `work` in a transaction, again from the start when the database aborted it for a deadlock
 * or lock-wait timeout (bounded by `retries`). `work` must compute everything from what it reads
 * inside the transaction, so a retry sees fresh rows. A database that does not answer becomes
 * UnavailableError.
 */
export function inTransaction<T>(db: Db, options: TransactionOptions, work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  if (profileOf(db).writers === 'pool') return withRetries(options, () => committed(work, (tracked) => pooledTransaction(db, tracked)));
  const deadline = lockDeadline(options);
  return withRetries(
    options,
    () =>
      oneWriterPerFile(db, deadline, () =>
        committed(work, (tracked) =>
          db.transaction(async (trx) => {
            await claimSqliteWriteLock(trx);
            return tracked(trx);
          }),
        ),
      ),
    deadline,
  );
}

/**
 * Runs `transaction` on `work` (passed in as `tracked`, which notes when `work` has succeeded) and
 * tells a failure of its COMMIT, one that came after that, by commitFailed: knex rejects with the
 * driver's error alone, whichever statement it was.
 *
 * A statement of the transaction that failed fails the transaction, even if `work` caught its error
 * and went on: after a failed statement PostgreSQL answers the COMMIT with a ROLLBACK, which knex
 * takes for success, and MySQL, after a deadlock, has rolled the transaction back and commits the
 * statements after it one by one. Either way a caller would be answered done for writes that are
 * not all there. The first such error is thrown as if `work` had, so a deadlock runs it again.
 * This makes a caught error loud, not harmless: on MySQL what ran after a caught deadlock has
 * committed already, so `work` must still never catch a statement's error.
 */
async function committed<T>(
  work: (trx: Knex.Transaction) => Promise<T>,
  transaction: (tracked: (trx: Knex.Transaction) => Promise<T>) => Promise<T>,
): Promise<T> {
  let workDone = false;
  try {
    return await transaction(async (trx) => {
      let failedStatement: unknown;
      trx.on('query-error', (error: unknown) => (failedStatement ??= error));
      const answer = await work(trx);
      if (failedStatement !== undefined) throw failedStatement;
      workDone = true;
      return answer;
    });
  } catch (error) {
    throw workDone ? commitFailed(toError(error)) : error;
  }
}

/**
 * What a COMMIT's error becomes. One of a kind the transaction runs again for (a deadlock, a
 * certification conflict), or one that says the database is away, stays as it is. Any other leaves
 * this process not knowing whether the transaction took effect: 503, to be tried again, as when a
 * commit's answer is lost (API.md), never 500.
 */
export function commitFailed(error: Error): Error {
  if (isRetryable(error) || isBusy(error) || isLockTimeout(error) || isUnavailable(error) || error instanceof UnavailableError) return error;
  return new CommitUnconfirmedError({ cause: error });
}

/**
 * A transaction on a server database; behind a pooler in transaction mode it sets its own isolation
 * and lock wait first (perTransactionSettings), as each session does otherwise.
 */
function pooledTransaction<T>(db: Db, work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  const settings = perTransactionSettings(db);
  if (settings === null) return db.transaction(work);
  return db.transaction(
    async (trx) => {
      await trx.raw(settings);
      return work(trx);
    },
    { isolationLevel: 'read committed' },
  );
}

/**
 * When a request stops waiting for locks: LOCK_TIMEOUT after it started, on the monotonic clock (a
 * step of the wall clock would end every wait at once, or stretch them).
 */
const lockDeadline = (options: TransactionOptions) => (options.lockTimeoutMs === undefined ? Infinity : performance.now() + options.lockTimeoutMs);

/** The tail of each queue of this process: its SQLite files' write transactions, its batches' transactions. */
type Queues = Map<string, Promise<unknown>>;

/**
 * Runs `work` after the earlier work of the same queue key has settled; work whose turn has not
 * come by its deadline fails then with `late` (a 503), and is not started when its turn comes. Before,
 * it was answered only when its turn came: behind a slow transaction of its batch (a large batch's
 * delete), long after LOCK_TIMEOUT.
 */
function inTurn<T>(queues: Queues, key: string, deadline: number, late: () => UnavailableError, work: () => Promise<T>): Promise<T> {
  const earlier = queues.get(key);
  let started = false;
  let givenUp = false;
  const turn = () => {
    if (givenUp || performance.now() > deadline) return Promise.reject(late());
    started = true;
    return work();
  };
  const run = (earlier ?? Promise.resolve()).then(turn, turn);
  const tail = run.catch(() => undefined);
  queues.set(key, tail);
  void tail.then(() => queues.get(key) === tail && queues.delete(key));
  if (earlier === undefined || !Number.isFinite(deadline)) return run;
  return new Promise<T>((resolve, reject) => {
    // Only while the work has not started: one under way is answered by its own end, or a retried
    // add, answered 503 although it committed, would add its items twice.
    const due = setTimeout(() => {
      if (started) return;
      givenUp = true;
      reject(late());
    }, deadline - performance.now());
    run.then(resolve, reject).finally(() => clearTimeout(due));
  });
}

const sqliteWriters: Queues = new Map();

/**
 * Runs SQLite write transactions of this process one after another per database file, across
 * every pool open on it (in-process replicas in tests, the CLI beside the service). better-sqlite3
 * waits for a busy file synchronously: a second connection of the same process waiting there
 * would block the event loop, and with it the transaction it waits for. A transaction whose turn
 * comes after its deadline is not started (503).
 */
function oneWriterPerFile<T>(db: Db, deadline: number, work: () => Promise<T>): Promise<T> {
  const file = path.resolve(String((db.client.config.connection as { filename?: string }).filename));
  return inTurn(sqliteWriters, file, deadline, () => new UnavailableError('the database file is busy (LOCK_TIMEOUT); try again'), work);
}

/** Each pool's queues of transactions by batch. */
const batchTurns = new WeakMap<Db, Queues>();

/**
 * Runs a transaction that locks batch `batchId`'s row first (add, seal, cancel, delete) after this
 * process's earlier ones on the same batch. A transaction waiting for a row lock holds a pooled
 * connection: while another connection held one batch's row, ten producer calls for that batch took
 * the whole pool, and every other batch's requests waited for a connection (503 after 5 s). So
 * only one transaction per batch and process holds a connection; the others wait here without
 * one, and one whose turn has not come within LOCK_TIMEOUT is answered 503 as a lock wait would be.
 * (The ack path has its own such bound: one group-commit round per batch.) SQLite runs one writer
 * per file already.
 */
export function inBatchTransaction<T>(db: Db, options: TransactionOptions, batchId: string, work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  if (profileOf(db).writers !== 'pool') return inTransaction(db, options, work);
  let queues = batchTurns.get(db);
  if (!queues) batchTurns.set(db, (queues = new Map()));
  const deadline = lockDeadline(options);
  return inTurn(
    queues,
    batchId,
    deadline,
    () => new LockHeldError(),
    () => inTransaction(db, options, locksWaitedUntil(db, options, deadline, work)),
  );
}

/** Below this, what a turn waited is not worth a statement: the lock wait may overshoot the deadline by it. */
const TURN_WAIT_SLACK_MS = 50;

/**
 * `work` with its lock waits ending at `deadline`: a request never waits longer than LOCK_TIMEOUT
 * for a lock (the API's contract), the time it waited for its turn included. (InnoDB counts whole
 * seconds: there what is left is rounded down, 0 being no wait at all. Rounded up, a call whose
 * turn came 1.1 s before its deadline waited 2 s more, 3 s in all: a CI failure on MariaDB.)
 */
function locksWaitedUntil<T>(db: Db, options: TransactionOptions, deadline: number, work: (trx: Knex.Transaction) => Promise<T>) {
  return async (trx: Knex.Transaction): Promise<T> => {
    const full = options.lockTimeoutMs;
    const left = deadline - performance.now();
    if (full === undefined || left > full - TURN_WAIT_SLACK_MS) return work(trx);
    const profile = profileOf(db);
    const shorter = profile.lockWaitStatement(left, true);
    const usual = profile.lockWaitStatement(full);
    if (!shorter || !usual || JSON.stringify(shorter) === JSON.stringify(usual)) return work(trx);
    await trx.raw(shorter.sql, [...shorter.bindings]);
    if (shorter.endsWithTransaction) return work(trx);
    // A session setting would outlive the transaction on the pooled connection: it is set back.
    // Refused twice, the connection is left to knex's pool to close: kept, its next transactions
    // would wait the shorter time for locks.
    const setBack = () => trx.raw(usual.sql, [...usual.bindings]);
    const setBackOrDrop = () => setBack().then(undefined, (error: unknown) => markedForPoolToClose(trx, error));
    let answer: T;
    try {
      answer = await work(trx);
    } catch (error) {
      await setBack().catch(setBackOrDrop); // the transaction fails anyway
      throw error;
    }
    // Setting it back is the transaction's last statement before COMMIT, so its error is the
    // transaction's. On Galera another node's write can abort a transaction between two statements
    // (a brute-force abort), told at the next one: this one. Swallowed, the COMMIT after it found no
    // transaction and answered OK, and a seal was answered `sealed` that was never written (the lost
    // seal of docs/scaling.md). It is tried once more, since the abort is told once, then thrown.
    await setBack().catch(async (error: unknown) => {
      await setBackOrDrop();
      throw error;
    });
    return answer;
  };
}

/**
 * Marks the transaction's connection so that knex's pool closes it instead of handing it out again
 * (the pool's check on acquiring a free connection reads knex's own `__knex__disposed` mark, which
 * knex sets itself on a connection that failed; its warning on closing it logs the mark). The
 * transaction itself goes on to its ROLLBACK.
 */
async function markedForPoolToClose(trx: Knex.Transaction, cause: unknown): Promise<void> {
  const connection = (await trx.client.acquireConnection()) as { __knex__disposed?: unknown };
  connection.__knex__disposed = new Error('the session could not set its usual lock wait back', { cause });
}

/** Pause between tries while another process holds the SQLite file. */
const BUSY_PAUSE_MS = 10;

/**
 * Runs one attempt of a transaction (or statement), and again after a deadlock (bounded by
 * `retries`, with a short random pause). While another process holds the SQLite file (SQLITE_BUSY
 * after a short busy_timeout slice), it tries again after a pause until `deadline`: the wait happens
 * here, asynchronously, not in better-sqlite3's blocking busy handler, so the process keeps serving.
 * What the caller can only retry later becomes UnavailableError (503): a database that does not
 * answer, a lock not granted within LOCK_TIMEOUT, and retries used up.
 */
export async function withRetries<T>(options: TransactionOptions, attempt: () => Promise<T>, deadline = lockDeadline(options)): Promise<T> {
  for (let retry = 0; ;) {
    try {
      return await attempt();
    } catch (caught) {
      const error = toError(caught);
      if (isBusy(error) && performance.now() < deadline) {
        await sleep(BUSY_PAUSE_MS);
        continue;
      }
      if (!isRetryable(error)) throw asUnavailable(error);
      if (retry >= options.retries) {
        throw new UnavailableError(`the database aborted the transaction ${retry + 1} times (deadlock or conflict); try again`, { cause: error });
      }
      retry += 1;
      options.onRetry?.(error, retry);
      await sleep(Math.random() * 5 * retry);
    }
  }
}

/** Maps what the caller can only retry later to UnavailableError and passes every other error through. */
export function asUnavailable(error: Error): Error {
  if (isLockTimeout(error)) return new LockHeldError({ cause: error });
  // A read outside a transaction (reading.ts) is not retried: a conflict there (SQLite's
  // SQLITE_BUSY_RECOVERY while another process recovers the WAL) is the same 503 as retries used up.
  if (isRetryable(error)) return new UnavailableError('the database aborted the request (deadlock or conflict); try again', { cause: error });
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
