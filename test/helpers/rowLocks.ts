import { spawn } from 'node:child_process';

import knex, { Knex } from 'knex';

import { Backend, isPostgresBackend, TestDatabase } from './backends';
import { until } from './realTime';
import { startService, TestService } from './service';

/** A pool of its own on a test's MariaDB or PostgreSQL database: the connections of another replica. */
export function otherConnections(database: TestDatabase, max = 1): Knex {
  const url = database.config.DATABASE_URL as string;
  const pg = isPostgresBackend(database.name);
  return knex({ client: pg ? 'pg' : 'mysql2', connection: (pg ? { connectionString: url } : { uri: url }) as never, pool: { min: 0, max } });
}

/**
 * A service on `backend` (LOCK_TIMEOUT 1 s) and a connection of another replica's to hold its rows,
 * for the tests of the describe block this is called in (started before them, stopped after).
 */
export function serviceWithRowHolder(backend: Backend): { svc: TestService; holder: Knex } {
  const started = {} as { svc: TestService; holder: Knex };
  beforeAll(async () => {
    started.svc = await startService(backend, { LOCK_TIMEOUT: '1s' });
    started.holder = otherConnections(started.svc.database);
  });
  afterAll(async () => {
    // Unset when the start failed: its own error is the one to see.
    await (started.holder as Knex | undefined)?.destroy();
    await (started.svc as TestService | undefined)?.stop();
  });
  return started;
}

/** Holds batch `id`'s row lock on `other` (as a stuck replica would) until the returned function is called. */
export async function holdBatchRow(other: Knex, id: string): Promise<() => Promise<void>> {
  const trx = await other.transaction();
  await trx('batches').where({ id }).forUpdate();
  return async () => {
    if (!trx.isCompleted()) await trx.rollback();
  };
}

/**
 * How many statements on `other`'s database wait for a row lock now (MariaDB or PostgreSQL). MariaDB
 * 10.11 lists a locking read by primary key that waits (in its "Statistics" stage) in its process
 * list but not in innodb_trx, so there it counts other sessions' locking reads still running.
 */
export async function lockWaiters(other: Knex, postgres: boolean): Promise<number> {
  const sql = postgres
    ? `SELECT count(*)::int AS n FROM ${await activityView(other)} WHERE datname = current_database() AND wait_event_type = 'Lock'`
    : "SELECT count(*) AS n FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID() AND command = 'Query' AND info LIKE '%for update%'";
  const result = (await other.raw(sql)) as { rows?: Array<{ n: number }> } | [Array<{ n: number }>];
  const rows = Array.isArray(result) ? result[0] : (result.rows ?? []);
  return Number(rows[0]?.n ?? 0);
}

const activityViews = new WeakMap<Knex, Promise<string>>();

/**
 * Where PostgreSQL's sessions are listed: on Citus a row lock is waited for on the worker that holds
 * the shard, which the coordinator's pg_stat_activity does not show, and citus_stat_activity does.
 */
function activityView(other: Knex): Promise<string> {
  let view = activityViews.get(other);
  if (!view) {
    const onCitus = other.raw("SELECT to_regclass('citus_stat_activity') IS NOT NULL AS citus") as Promise<{ rows: Array<{ citus: boolean }> }>;
    activityViews.set(other, (view = onCitus.then(({ rows }) => (rows[0]?.citus ? 'citus_stat_activity' : 'pg_stat_activity'))));
    view.catch(() => activityViews.delete(other)); // a failed question is asked again next time
  }
  return view;
}

/** Resolves once a statement on `other`'s database waits for a row lock (see lockWaiters). */
export function untilLockWaited(other: Knex, postgres: boolean): Promise<void> {
  return until(async () => (await lockWaiters(other, postgres)) > 0);
}

/**
 * Another process takes SQLite file `file`'s write lock (as a second service or the CLI would) and
 * holds it for `ms` or until `release` is called; resolves once the lock is held.
 */
export async function holdSqliteFile(file: string, ms: number): Promise<{ release(): Promise<void>; exited: Promise<unknown> }> {
  const holder = spawn(
    process.execPath,
    [
      '-e',
      `const db = require('better-sqlite3')(process.argv[1]); db.exec('BEGIN IMMEDIATE'); process.stdout.write('held');
       const release = () => { db.exec('ROLLBACK'); process.exit(0); };
       setTimeout(release, ${ms}); process.stdin.on('data', release);`,
      file,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  const exited = new Promise((resolve) => holder.once('exit', resolve));
  await new Promise<void>((resolve, reject) => {
    holder.stdout.once('data', () => resolve());
    holder.once('exit', (code) => reject(new Error(`the SQLite lock holder exited (${code}) before it held the lock`)));
  });
  return {
    exited,
    async release() {
      if (holder.exitCode === null) holder.stdin.write('release\n');
      await exited;
    },
  };
}
