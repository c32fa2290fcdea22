import { randomUUID } from 'node:crypto';

import { createTableInTurn, Db } from './db';
import { isBusy, isDuplicateKey, isRetryable } from './dbErrors';
import { profileOf } from './dialect';

/**
 * A lock that lets one process at a time run migrations, cluster-wide. knex's own lock is a row
 * read FOR UPDATE and then flipped, and a second migrator fails at once ("Migration table is already
 * locked"); on Galera FOR UPDATE locks only the local node, and GET_LOCK is not supported. This lock
 * is the insert of one fixed primary key: on one server the unique key lets one insert win, on
 * Galera certification does (the loser of two concurrent inserts gets a deadlock error at commit),
 * and the others wait and try again until the holder deletes the row.
 */
const TABLE = 'rollcall_migration_lock';

export interface MigrationLockOptions {
  /** How long to wait for another migrator before giving up. */
  waitMs: number;
  /** A lock row older than this, not refreshed by a live holder, was left by a crashed one. */
  staleMs: number;
  /** Pause between attempts (with jitter). */
  pollMs: number;
}

export const defaultMigrationLockOptions: MigrationLockOptions = { waitMs: 10 * 60_000, staleMs: 2 * 60_000, pollMs: 100 };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `step` again while SQLite says the file is busy, until `deadline` (performance.now()): another
 * process sharing the file (a migrator holding it for its whole run, a service writing) holds its
 * write lock longer than a connection's busy_timeout slice (20 ms), and a second process starting
 * beside a migrating one exited with SQLITE_BUSY instead of waiting its turn. SQLite's DDL is
 * transactional: a step that failed busy changed nothing, and knex's migrations go on from the last
 * one committed.
 */
export async function whileBusy<T>(step: () => Promise<T>, deadline: number, pollMs = defaultMigrationLockOptions.pollMs, busy = isBusy): Promise<T> {
  for (;;) {
    try {
      return await step();
    } catch (error) {
      if (!busy(error) || performance.now() > deadline) throw error;
    }
    await sleep(pollMs / 2 + Math.random() * pollMs);
  }
}

/** CREATE TABLE IF NOT EXISTS: a race of two creators ends with one table (createTableInTurn). */
async function ensureTable(db: Db, deadline: number, pollMs: number): Promise<void> {
  const { tableOptions } = profileOf(db);
  const sql = `CREATE TABLE IF NOT EXISTS ${TABLE} (id INTEGER NOT NULL PRIMARY KEY, owner VARCHAR(64) NOT NULL, refreshed_at BIGINT NOT NULL)${tableOptions}`;
  await whileBusy(() => createTableInTurn(db, sql), deadline, pollMs);
}

/** One attempt: true when this insert took the lock. */
async function tryInsert(db: Db, owner: string): Promise<boolean> {
  try {
    await db(TABLE).insert({ id: 1, owner, refreshed_at: Date.now() });
    return true;
  } catch (error) {
    // Taken already (the key exists), lost to a concurrent insert on another node (certification),
    // or the SQLite file held by another process (its migrator, say) past the busy_timeout slice.
    if (isDuplicateKey(error) || isRetryable(error) || isBusy(error)) return false;
    throw error;
  }
}

/** Removes a lock whose holder stopped refreshing it (crashed mid-migration). */
async function breakStale(db: Db, staleMs: number): Promise<void> {
  await db(TABLE)
    .where('id', 1)
    .where('refreshed_at', '<', Date.now() - staleMs)
    .delete();
}

/**
 * Runs `work` holding the migration lock, waiting for another holder to finish first. The row is
 * refreshed while `work` runs, so a long migration is not taken for a crashed one.
 */
export async function withMigrationLock<T>(db: Db, work: () => Promise<T>, options: MigrationLockOptions = defaultMigrationLockOptions): Promise<T> {
  const deadline = performance.now() + options.waitMs; // elapsed time; refreshed_at is wall time, shared with other hosts
  await ensureTable(db, deadline, options.pollMs);
  const owner = randomUUID();
  while (!(await tryInsert(db, owner))) {
    if (performance.now() > deadline) throw new Error(`another process has held the migration lock (table ${TABLE}) for longer than ${options.waitMs} ms`);
    await breakStale(db, options.staleMs).catch(() => undefined); // a conflict here only means someone else broke it
    await sleep(options.pollMs / 2 + Math.random() * options.pollMs);
  }
  const refresh = setInterval(
    () => {
      db(TABLE)
        .where({ id: 1, owner })
        .update({ refreshed_at: Date.now() })
        .catch(() => undefined);
    },
    Math.max(1000, options.staleMs / 4),
  );
  refresh.unref();
  let result: T;
  try {
    result = await work();
  } catch (error) {
    clearInterval(refresh);
    // The migration's own error is the one to report; a row left behind is broken once stale.
    await release(db, owner).catch(() => undefined);
    throw error;
  }
  clearInterval(refresh);
  await whileBusy(() => release(db, owner), performance.now() + options.waitMs, options.pollMs);
  return result;
}

const release = (db: Db, owner: string) => db(TABLE).where({ id: 1, owner }).delete();
