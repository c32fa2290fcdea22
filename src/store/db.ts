import fs from 'node:fs';
import path from 'node:path';

import knex, { Knex } from 'knex';
import type { Logger } from 'pino';

import type { Config } from '../config';
import { DatabaseEncodingError, toError, UnavailableError } from '../domain/errors';
import { isReadOnly } from './dbErrors';
import { lockWaitSeconds, profileOf } from './dialect';

export type Db = Knex;
/** Anything that runs a query: the pool or an open transaction. */
export type Queryable = Knex | Knex.Transaction;
/** An open transaction, as the store's functions take it (services never look inside). */
export type Transaction = Knex.Transaction;
/** A statement built by a store function, for a transaction to run (services never look inside). */
export type Statement = Knex.QueryBuilder;

/** knex's own messages (connection errors, warnings) go to the service log, not the console. */
function knexLog(log?: Logger): Knex.Config['log'] {
  const write = (level: 'warn' | 'error' | 'debug') => (message: unknown) => log?.[level]({ knex: String(message) }, 'knex');
  return { warn: write('warn'), error: write('error'), deprecate: write('warn'), debug: write('debug') };
}

/** How long one SQLite statement waits, blocking, for a file another process holds. */
const SQLITE_BUSY_SLICE_MS = 20;

export type DbConfig = Pick<Config, 'DATABASE_URL' | 'SQLITE_PATH' | 'DB_POOL_SIZE' | 'DB_POOLER' | 'LOCK_TIMEOUT' | 'DB_QUERY_TIMEOUT'> & {
  /**
   * How long a transaction may sit idle before the server ends it (ms; 0: never). Not a setting of
   * its own: DB_QUERY_TIMEOUT, also on a pool opened without that statement limit for a sweep
   * (withoutQueryTimeout's `keepIdleLimit`).
   */
  idleTransactionLimitMs?: number;
};

/** How long a transaction of this pool may sit idle before the server ends it (0: never). */
const idleLimitOf = (config: DbConfig): number => config.idleTransactionLimitMs ?? config.DB_QUERY_TIMEOUT;

/**
 * The sql_mode of every MySQL connection, whatever the server's default. Without
 * NO_BACKSLASH_ESCAPES (and ANSI_QUOTES) the driver's escaping of bound values is exact; with it, a
 * crafted string could end its literal early (docs/security.md).
 */
const SAFE_SQL_MODE = 'STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

interface MysqlSession {
  query(sql: string, values: unknown[], callback: (error: Error | null, rows?: unknown) => void): void;
}

type MysqlQuery = (options: unknown, ...rest: unknown[]) => unknown;

/**
 * Gives every query of a mysql2 connection DB_QUERY_TIMEOUT (mysql2 has no per-connection setting):
 * a query unanswered by then fails (PROTOCOL_SEQUENCE_TIMEOUT, 503) and the connection is closed, so
 * knex's pool drops it and no later query queues behind the silent one. Without it, a database host
 * that stops answering on an open connection (a network cut, a frozen VM) held each request until
 * TCP gave up, some fifteen minutes. Covers knex's queries and the hot paths' alike (mysqlDriver.ts).
 */
function answeredWithin(conn: MysqlSession & { destroy(): void }, timeoutMs: number): void {
  const query = (conn.query as unknown as MysqlQuery).bind(conn);
  let closed = false;
  const bounded: MysqlQuery = (options, ...rest) => {
    const callbackAt = rest.findIndex((arg) => typeof arg === 'function');
    const callback = rest[callbackAt] as ((error: { code?: unknown } | null, ...results: unknown[]) => void) | undefined;
    // What comes after on the closed connection (knex's ROLLBACK) fails naming the cause, where
    // mysql2's "Can't add new command when connection is in closed state" hid it from the log.
    if (closed && callback) {
      const error = Object.assign(new Error(`the connection was closed when a query went unanswered for DB_QUERY_TIMEOUT (${timeoutMs} ms)`), {
        code: 'PROTOCOL_SEQUENCE_TIMEOUT',
      });
      return void process.nextTick(() => callback(error));
    }
    if (callback)
      rest[callbackAt] = (error: { code?: unknown } | null, ...results: unknown[]) => {
        if (error?.code === 'PROTOCOL_SEQUENCE_TIMEOUT' && !closed) {
          closed = true;
          conn.destroy();
        }
        callback(error, ...results);
      };
    return query({ timeout: timeoutMs, ...(typeof options === 'string' ? { sql: options } : (options as object)) }, ...rest);
  };
  (conn as unknown as { query: MysqlQuery }).query = bounded;
}

const run = (conn: MysqlSession, sql: string, values: unknown[] = []) =>
  new Promise<unknown>((resolve, reject) => conn.query(sql, values, (error, rows) => (error ? reject(error) : resolve(rows))));

/**
 * Every MySQL session: autocommit on (a server that starts sessions with it off, by my.cnf or
 * init_connect, left every write made outside a transaction uncommitted: a batch answered 201 that
 * no other connection saw, and lost with its connection); the safe sql_mode; row locks (innodb_lock_wait_timeout) and table/metadata
 * locks (lock_wait_timeout: LOCK TABLES, FLUSH TABLES WITH READ LOCK, an ALTER's end) both end at
 * LOCK_TIMEOUT, with 1205; locking reads read the newest row (locksReadNewestRows); abandoned
 * transactions end at the server (endsAbandonedTransactions);
 * and with `causalReads`, Galera's causal reads (syncWaitOnGalera).
 */
async function prepareMysqlSession(conn: MysqlSession, config: DbConfig, causalReads: boolean): Promise<void> {
  const seconds = lockWaitSeconds(config.LOCK_TIMEOUT);
  await run(conn, 'SET SESSION sql_mode = ?, innodb_lock_wait_timeout = ?, lock_wait_timeout = ?, autocommit = 1', [SAFE_SQL_MODE, seconds, seconds]);
  await readsCommitted(conn);
  await locksReadNewestRows(conn);
  if (idleLimitOf(config) > 0) await endsAbandonedTransactions(conn, idleLimitOf(config));
  if (causalReads) await syncWaitOnGalera(conn);
}

/**
 * A transaction idle for DB_QUERY_TIMEOUT ends at the server, connection and all (MariaDB's
 * idle_transaction_timeout, 10.3 on). The service never leaves one idle that long: one idle so
 * long is one whose client timed out on an answer that was lost, and the server, which may never
 * hear the client go (a partition), kept it and its row locks for hours (wait_timeout), every
 * replica's requests for that batch answered 503. MySQL has no such setting: there it stays.
 */
async function endsAbandonedTransactions(conn: MysqlSession, timeoutMs: number): Promise<void> {
  await setWhereKnown(conn, 'SET SESSION idle_transaction_timeout = ?', [Math.ceil(timeoutMs / 1000)]);
}

/**
 * Every transaction reads committed data, as on PostgreSQL, where the server allows it. Under
 * REPEATABLE READ a locking read of a key no row has locks the gap where it would be, and the gap past
 * the newest batch (UUIDv7 ids grow with time) is where every new batch and its groups go: acks and
 * seals of one tenant naming made-up ids past it, sent without pause, held up every tenant's opens
 * and adds, 503 after LOCK_TIMEOUT (test/security/madeUpIds.test.ts). READ COMMITTED locks rows,
 * not gaps. Not where the binary log is written statement by statement (log_bin with binlog_format
 * STATEMENT), which refuses InnoDB writes under READ COMMITTED: there the server's level stays.
 */
async function readsCommitted(conn: MysqlSession): Promise<void> {
  if (await logsStatements(conn)) return;
  await run(conn, 'SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
}

/** Whether the session's writes go to a statement-based binary log. A server without the variables (a future MySQL) has none. */
async function logsStatements(conn: MysqlSession): Promise<boolean> {
  try {
    const [binlog] = (await run(conn, 'SELECT @@log_bin AS logBin, @@SESSION.binlog_format AS format')) as Array<{ logBin: unknown; format: unknown }>;
    return Number(binlog?.logBin) === 1 && String(binlog?.format).toUpperCase() === 'STATEMENT';
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ER_UNKNOWN_SYSTEM_VARIABLE') throw error;
    return false;
  }
}

/**
 * A locking read (FOR UPDATE, FOR SHARE, an UPDATE's or a DELETE's) reads the newest committed row,
 * whatever the transaction read plainly before: the callback and child-outcome claims and the sweep
 * read plainly, then lock, and a row another replica changed meanwhile is read again under its lock
 * (no longer due, or still due). MariaDB 11.6 made such a read fail instead in REPEATABLE READ
 * (innodb_snapshot_isolation ON by default, 1020 "Record has changed since last read"): replicas'
 * claims of the same callback failed each other's. Off, as MariaDB up to 11.4 has it; MySQL and
 * MariaDB before 10.6.18 do not have it, and there nothing is set.
 */
async function locksReadNewestRows(conn: MysqlSession): Promise<void> {
  await setWhereKnown(conn, 'SET SESSION innodb_snapshot_isolation = OFF');
}

/** Sets a session variable that some servers (MySQL, older MariaDB) do not have: there, nothing is set. */
async function setWhereKnown(conn: MysqlSession, sql: string, values: unknown[] = []): Promise<void> {
  try {
    await run(conn, sql, values);
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ER_UNKNOWN_SYSTEM_VARIABLE') throw error;
  }
}

/**
 * On a Galera node (wsrep_on), a session whose reads must see what other nodes committed waits for
 * the cluster's causality before each read (wsrep_sync_wait=1: SELECT, SHOW, BEGIN): a status read
 * or /wait on node B right after an ack answered on node A sees that ack. Elsewhere (plain MariaDB,
 * MySQL, where the variable may not exist) nothing is set.
 */
async function syncWaitOnGalera(conn: MysqlSession): Promise<void> {
  const rows = await run(conn, "SHOW VARIABLES LIKE 'wsrep_on'");
  const on = Array.isArray(rows) && rows.some((row: { Value?: unknown }) => String(row.Value).toUpperCase() === 'ON');
  if (on) await run(conn, 'SET SESSION wsrep_sync_wait = 1');
}

/**
 * `causalReads`: the pool's reads wait for other Galera nodes' commits (syncWaitOnGalera). Only the
 * main pool: the multi-statement pool is not used on Galera at all (readDecideWrite.ts).
 */
function mysqlPool(config: DbConfig, log: Logger | undefined, multipleStatements: boolean, causalReads: boolean): Db {
  return knex({
    log: knexLog(log),
    client: 'mysql2',
    // Every value is bound by the driver, never spliced into the SQL text by this code.
    // TCP keepalive from 10 s idle (mysql2 turns it on, but after the kernel's default, 2 h): a
    // connection whose peer vanished is found dead within minutes (see openPostgres).
    connection: {
      uri: (config.DATABASE_URL as string).replace(/^mysql2:/, 'mysql:'),
      supportBigNumbers: true,
      connectTimeout: 5000,
      enableKeepAlive: true,
      keepAliveInitialDelay: 10_000,
      multipleStatements,
    },
    pool: {
      min: 0,
      max: config.DB_POOL_SIZE,
      afterCreate(conn: MysqlSession & { destroy(): void }, done: (err: Error | null, conn: unknown) => void) {
        if (config.DB_QUERY_TIMEOUT > 0) answeredWithin(conn, config.DB_QUERY_TIMEOUT);
        prepareMysqlSession(conn, config, causalReads).then(
          () => done(null, conn),
          (error: unknown) => done(toError(error), conn),
        );
      },
    },
    acquireConnectionTimeout: 5000,
  } as Knex.Config);
}

/**
 * How many write transactions can make progress at once: the pool's size (SQLite's one writer is
 * one). More merged ack transactions than this would only queue for a connection, and smaller.
 */
export function writerSlots(db: Db): number {
  return profileOf(db).writers === 'one-per-file' ? 1 : Number((db.client.config.pool as { max?: number } | undefined)?.max ?? 1);
}

/** The pool whose connections take several statements per query (readDecideWrite.ts); else db itself. */
const multiStatementPools = new WeakMap<Db, Db>();

export function multiStatementPool(db: Db): Db {
  return multiStatementPools.get(db) ?? db;
}

/**
 * MySQL/MariaDB: two pools. Only the ack transaction needs multi-statement queries (two round
 * trips instead of four), so only its pool allows them: every other statement runs where a second
 * statement could never ride along. Destroying the main pool destroys both.
 */
function openMysql(config: DbConfig, log?: Logger): Db {
  const main = mysqlPool(config, log, false, true);
  const multi = mysqlPool(config, log, true, false);
  multiStatementPools.set(main, multi);
  // knex's own destroy() is read-only; it ends in its client's destroy().
  const client = main.client as { destroy(callback?: unknown): Promise<void> };
  const destroyMain = client.destroy.bind(client);
  client.destroy = async (callback?: unknown) => {
    await multi.destroy();
    await destroyMain(callback);
  };
  return main;
}

const galeraChecks = new WeakMap<Db, Promise<boolean>>();

const citusChecks = new WeakMap<Db, Promise<boolean>>();

/**
 * True when the PostgreSQL database has the citus extension (its tables sharded by migration 0014),
 * asked once per pool: the ack's one-statement form spans batches, which Citus refuses for a locking
 * read, so there the ack runs its per-batch statements (docs/scaling.md).
 */
export function onCitus(db: Db): Promise<boolean> {
  if (profileOf(db).name !== 'postgres') return Promise.resolve(false);
  let check = citusChecks.get(db);
  if (!check) {
    check = db('pg_extension')
      .select('extname')
      .where('extname', 'citus')
      .then((rows: unknown[]) => rows.length > 0);
    check.catch(() => citusChecks.delete(db)); // not answering now: ask again next time
    citusChecks.set(db, check);
  }
  return check;
}

/**
 * Makes `db` (plain PostgreSQL) take Citus's statement forms from now on, as onCitus would on a
 * coordinator: the tests run them on every commit (the `pg-citus-forms` backend of
 * test/helpers/backends.ts), where no Citus cluster runs. Only the forms: nothing is sharded, and Citus's own settings are not sent.
 */
export function useCitusForms(db: Db): void {
  if (profileOf(db).name !== 'postgres') throw new Error('Citus forms are PostgreSQL statements');
  citusChecks.set(db, Promise.resolve(true));
}

/** onGalera's answers once they came: for what must know at once (poolsStats). */
const knownGalera = new WeakMap<Db, boolean>();

/**
 * True when the database is a Galera cluster node (wsrep_on=ON), asked once per pool. MySQL, which
 * has no such variable, answers with no row.
 */
export function onGalera(db: Db): Promise<boolean> {
  if (profileOf(db).name !== 'mysql') return Promise.resolve(false);
  let check = galeraChecks.get(db);
  if (!check) {
    check = db
      .raw("SHOW VARIABLES LIKE 'wsrep_on'")
      .then(([rows]: [Array<{ Value?: unknown }>]) => rows.some((row) => String(row.Value).toUpperCase() === 'ON'))
      .then((galera: boolean) => (knownGalera.set(db, galera), galera));
    check.catch(() => galeraChecks.delete(db)); // not answering now: ask again next time
    galeraChecks.set(db, check);
  }
  return check;
}

/** The database a DATABASE_URL names, by its scheme (config.ts accepts only these). */
export const isPostgresUrl = (url: string): boolean => /^postgres(ql)?:\/\//.test(url);

interface PostgresSession {
  query(sql: string, values: unknown[], callback: (error: Error | null) => void): void;
}

/**
 * The settings every PostgreSQL transaction runs with, as `set_config` calls (`local`: for the
 * current transaction only): it waits at most LOCK_TIMEOUT for a lock (55P03 past it), and, with
 * DB_QUERY_TIMEOUT, the server ends it when it is left idle as long (as MariaDB's
 * idle_transaction_timeout: endsAbandonedTransactions). Whole numbers of the config, never input.
 */
function postgresSettings(config: DbConfig, local: boolean): string[] {
  const calls = [`set_config('lock_timeout', '${Math.floor(config.LOCK_TIMEOUT)}ms', ${local})`];
  const idle = idleLimitOf(config);
  if (idle > 0) calls.push(`set_config('idle_in_transaction_session_timeout', '${Math.floor(idle)}ms', ${local})`);
  return calls;
}

/**
 * On Citus, a shortened lock wait (SET LOCAL lock_timeout, dialect.ts) must reach the workers, which
 * hold the row locks; the session's own settings do not (docs/scaling.md). Set for the session, or
 * behind a pooler in transaction mode for each transaction (`local`): set only for sessions, a
 * pooler's transactions waited twice LOCK_TIMEOUT for a shortened wait. Nothing elsewhere.
 */
function citusPropagatesSetLocal(local: boolean): string {
  return `(SELECT set_config('citus.propagate_set_commands', 'local', ${local}) FROM pg_extension WHERE extname = 'citus')`;
}

/** Behind a pooler in transaction mode: what each transaction of the pool sets first (perTransactionSettings). */
const settingsOfTransactions = new WeakMap<Db, string>();

/**
 * PostgreSQL behind a pooler in transaction mode (DB_POOLER=transaction): the statement each
 * transaction runs right after `BEGIN ISOLATION LEVEL READ COMMITTED`, since a setting of the
 * session would land on whichever server session the pooler lent at that moment, and stay there
 * for the next client. Null when each pooled connection is a session of its own, which holds the
 * settings (openPostgres).
 */
export function perTransactionSettings(db: Db): string | null {
  return settingsOfTransactions.get(db) ?? null;
}

/**
 * PostgreSQL through node-postgres. Every session reads committed data (the isolation every
 * transaction here is written for, whatever the server's default) and runs with postgresSettings;
 * behind a pooler in transaction mode, every transaction does instead. SSL options come from the
 * URL (`sslmode`).
 */
function openPostgres(config: DbConfig, log?: Logger): Db {
  const sessionless = config.DB_POOLER === 'transaction';
  const db = knex({
    log: knexLog(log),
    client: 'pg',
    // Pipeline mode: statements queued on a client go out without waiting for each answer (the hot
    // paths' two round trips, pgDriver.ts). knex awaits each of its own statements, so for knex
    // nothing changes. Behind a pooler in transaction mode only a transaction's statements are ever
    // queued together, and the pooler keeps one server session for them until it ends.
    // query_timeout (DB_QUERY_TIMEOUT): a statement unanswered by then fails ('Query read timeout',
    // 503) and, in pipeline mode, node-postgres closes the connection, which knex's pool then drops.
    connection: {
      connectionString: config.DATABASE_URL as string,
      connectionTimeoutMillis: 5000,
      // TCP keepalive, which node-postgres leaves off: a connection whose peer vanished (a partition,
      // a host gone) is found dead by the kernel's probes, within minutes, instead of never; a
      // statement without DB_QUERY_TIMEOUT (a sweep's, a migration's) then fails rather than waits.
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      pipeline: true,
      ...(config.DB_QUERY_TIMEOUT > 0 ? { query_timeout: config.DB_QUERY_TIMEOUT } : {}),
    },
    pool: {
      min: 0,
      max: config.DB_POOL_SIZE,
      ...(sessionless ? {} : { afterCreate: setUpPostgresSession(config) }),
    },
    acquireConnectionTimeout: 5000,
  } as Knex.Config);
  if (sessionless) settingsOfTransactions.set(db, `SELECT ${[...postgresSettings(config, true), citusPropagatesSetLocal(true)].join(', ')}`);
  return db;
}

/** Sets a new pooled session up: read committed by default, and postgresSettings for the session. */
function setUpPostgresSession(config: DbConfig) {
  return (conn: PostgresSession, done: (err: Error | null, conn: unknown) => void) => {
    const calls = ["set_config('default_transaction_isolation', 'read committed', false)", ...postgresSettings(config, false), citusPropagatesSetLocal(false)];
    conn.query(`SELECT ${calls.join(', ')}`, [], (err) => done(err, conn));
  };
}

/** How each server database's pool was opened, to open its like without DB_QUERY_TIMEOUT. */
const openedWith = new WeakMap<Db, { config: DbConfig; log?: Logger }>();

/** Opens the configured database: MySQL/MariaDB or PostgreSQL when DATABASE_URL is set, else an embedded SQLite file. */
export function openDb(config: DbConfig, log?: Logger): Db {
  if (config.DATABASE_URL) {
    const db = isPostgresUrl(config.DATABASE_URL) ? openPostgres(config, log) : openMysql(config, log);
    openedWith.set(db, { config, log });
    return db;
  }
  if (config.SQLITE_PATH !== ':memory:') fs.mkdirSync(path.dirname(path.resolve(config.SQLITE_PATH)), { recursive: true });
  return knex({
    log: knexLog(log),
    client: 'better-sqlite3',
    connection: { filename: config.SQLITE_PATH },
    useNullAsDefault: true,
    // SQLite has one writer; one connection serializes this process's transactions without busy errors.
    pool: {
      min: 1,
      max: 1,
      afterCreate(conn: { pragma(sql: string): unknown }, done: (err: Error | null, conn: unknown) => void) {
        // WAL lets readers of other processes run beside the writer; FULL fsyncs every commit so an
        // answered ack survives a power loss. better-sqlite3 waits for a busy file synchronously,
        // blocking the event loop, so it waits only a short slice; the rest of LOCK_TIMEOUT is
        // waited asynchronously between tries (withRetries in transaction.ts).
        conn.pragma('journal_mode = WAL');
        conn.pragma('synchronous = FULL');
        conn.pragma(`busy_timeout = ${Math.min(config.LOCK_TIMEOUT, SQLITE_BUSY_SLICE_MS)}`);
        conn.pragma('foreign_keys = ON');
        done(null, conn);
      },
    },
  });
}

/**
 * Runs `work` on a pool like `db` whose statements may take as long as they take: migrations (an
 * index built on a large table) and waiting for another replica's migration lock are slow by
 * nature, not a database that stopped answering. SQLite, in-process, has no such limit.
 * `minConnections`: the pool has at least that many, though DB_POOL_SIZE be smaller. `keepIdleLimit`:
 * the server still ends a transaction of that pool left idle for DB_QUERY_TIMEOUT, for work that
 * never leaves one idle (a sweep's statements run back to back): one whose replica vanished
 * mid-chunk (a partition, a host gone) held its batch rows and links, every request for them
 * answered 503, until the server's TCP keepalive or wait_timeout gave up, hours later.
 */
export async function withoutQueryTimeout<T>(
  db: Db,
  work: (db: Db) => Promise<T>,
  { minConnections = 1, keepIdleLimit = false }: { minConnections?: number; keepIdleLimit?: boolean } = {},
): Promise<T> {
  const opened = openedWith.get(db);
  if (!opened || (opened.config.DB_QUERY_TIMEOUT === 0 && opened.config.DB_POOL_SIZE >= minConnections)) return work(db);
  const idleTransactionLimitMs = keepIdleLimit ? idleLimitOf(opened.config) : 0;
  const unlimited = openDb(
    { ...opened.config, DB_QUERY_TIMEOUT: 0, idleTransactionLimitMs, DB_POOL_SIZE: Math.max(minConnections, opened.config.DB_POOL_SIZE) },
    opened.log,
  );
  try {
    return await work(unlimited);
  } finally {
    await unlimited.destroy();
  }
}

/** Where the readiness probe reaches the database, and how many of its checks may run at once. */
export interface ProbePool {
  db: Db;
  mostChecks: number;
  close(): Promise<void>;
}

/** Connections of a server database's probe pool: one for a check, one for a check beside one stuck. */
const PROBE_CONNECTIONS = 2;

/**
 * A pool of its own beside `db`'s server database, for the readiness probe: it asks whether the
 * database answers, not whether this replica's pool has a connection free. On the pool itself, a
 * probe waited behind every request for each of its four statements: with the pool busy on a hot
 * batch's lock waits, up to four LOCK_TIMEOUTs, past an orchestrator's probe timeout, and every
 * replica was taken out of service at once. Its connections open when a probe comes. SQLite
 * (in-process, one writer) keeps its one pool, one check at a time.
 */
export function probePool(db: Db): ProbePool {
  const opened = openedWith.get(db);
  if (!opened) return { db, mostChecks: 1, close: async () => undefined };
  const probes = openDb({ ...opened.config, DB_POOL_SIZE: PROBE_CONNECTIONS }, opened.log);
  return { db: probes, mostChecks: PROBE_CONNECTIONS, close: () => probes.destroy() };
}

/** DB_QUERY_TIMEOUT of a server database's pool: how long its statements may go unanswered; 0 for none (and SQLite). */
export function queryTimeoutOf(db: Db): number {
  return openedWith.get(db)?.config.DB_QUERY_TIMEOUT ?? 0;
}

/** How often, at most, the database is asked whether it still answers while unlimited work runs. */
const WATCH_INTERVAL_MS = 5_000;

/**
 * Runs `work` (migrations or a sweep, on a pool that waits without a limit, as an index built on a
 * large table or a large batch's delete takes what it takes: withoutQueryTimeout), and fails
 * instead once `db` has answered nothing for its DB_QUERY_TIMEOUT: a database host that froze
 * mid-migration held the start, before the service listens, for ever, and one that froze mid-sweep
 * held the sweep (and `POST /v1/admin/sweep`) until it answered again. `db` is asked on its own
 * pool, which has that limit (`ping`); a ping that fails (too many connections, a refused connect)
 * is borne until the limit has passed without any answer. Without DB_QUERY_TIMEOUT (0, and on SQLite) nothing is watched. The frozen statement
 * itself may still hang then, holding its one connection until the host answers or TCP gives up
 * (a start that failed exits, main.ts and cli/migrate.ts, which ends it).
 */
export async function unlessTheDatabaseFreezes<T>(db: Db, what: string, work: () => Promise<T>): Promise<T> {
  const limitMs = queryTimeoutOf(db);
  if (limitMs === 0) return work();
  let watching = true;
  let timer: NodeJS.Timeout | undefined;
  const frozen = new Promise<never>((_, reject) => {
    let answeredAt = performance.now();
    const watch = async (): Promise<void> => {
      if (!watching) return;
      try {
        await ping(db);
        answeredAt = performance.now();
      } catch (error) {
        if (watching && performance.now() - answeredAt >= limitMs) {
          reject(new UnavailableError(`the database answered nothing for ${limitMs} ms (DB_QUERY_TIMEOUT) while ${what}`, { cause: error }));
          return;
        }
      }
      if (watching) timer = setTimeout(() => void watch(), Math.min(WATCH_INTERVAL_MS, limitMs / 3));
    };
    timer = setTimeout(() => void watch(), Math.min(WATCH_INTERVAL_MS, limitMs / 3));
  });
  frozen.catch(() => undefined); // once the work has ended nobody listens to it: no unhandled rejection
  try {
    return await Promise.race([work(), frozen]);
  } finally {
    watching = false;
    clearTimeout(timer);
  }
}

/** Checks that the database answers (the profile's pingStatement); UnavailableError when it does not. */
export async function ping(db: Db): Promise<void> {
  try {
    await db.raw(profileOf(db).pingStatement);
  } catch (caught) {
    throw new UnavailableError('the database is not available', { cause: toError(caught) });
  }
}

/**
 * Checks that the database takes this service's writes where it can tell (the profile's
 * writableCheck): a PostgreSQL standby, or a MySQL/MariaDB server made read-only for a failover,
 * answers every read and would refuse every batch, add and ack. `table` is one the schema always
 * has, for a write that matches no row of it.
 */
export async function ensureWritable(db: Db, table: string): Promise<void> {
  const check = profileOf(db).writableCheck;
  if (check === null) return;
  let readOnly: unknown = false;
  try {
    if (check.kind === 'query') readOnly = ((await db.raw(check.sql)) as { rows: Array<{ read_only: unknown }> }).rows[0]?.read_only;
    else await db.raw('UPDATE ?? SET ?? = ?? WHERE 1 = 0', [table, 'id', 'id']);
  } catch (caught) {
    if (!isReadOnly(caught)) throw new UnavailableError('the database is not available', { cause: toError(caught) });
    readOnly = true;
  }
  if (readOnly !== false) throw new UnavailableError('the database takes no writes (read-only: a standby, read_only, or a read-only default for sessions)');
}

/**
 * Refuses a database not in UTF-8, which would refuse text the API takes (the profile's encodingQuery).
 * One that does not answer is not judged here: what comes next (the migrations) waits for it or
 * reports it, as before this check.
 */
export async function ensureUnicode(db: Db): Promise<void> {
  const sql = profileOf(db).encodingQuery;
  if (sql === null) return;
  let encoding: unknown;
  try {
    encoding = ((await db.raw(sql)) as { rows: Array<{ encoding: unknown }> }).rows[0]?.encoding;
  } catch {
    return;
  }
  if (encoding !== 'UTF8') throw new DatabaseEncodingError(String(encoding));
}

export interface PoolStats {
  used: number;
  free: number;
  pendingAcquires: number;
}

/** The connection pool's state for metrics; null before knex has made its pool. */
export function poolStats(db: Db): PoolStats | null {
  const pool = (db.client as { pool?: { numUsed(): number; numFree(): number; numPendingAcquires(): number } }).pool;
  return pool ? { used: pool.numUsed(), free: pool.numFree(), pendingAcquires: pool.numPendingAcquires() } : null;
}

/**
 * Each pool's connections by name: `main`, and on MySQL/MariaDB (not Galera) `ack`, the ack
 * transactions' own (multiStatementPool). There, a gauge of the main pool alone showed it idle while acks waited for
 * connections.
 */
export function poolsStats(db: Db): Array<{ pool: 'main' | 'ack'; stats: PoolStats }> {
  const pools: Array<{ pool: 'main' | 'ack'; stats: PoolStats | null }> = [{ pool: 'main', stats: poolStats(db) }];
  const ackPool = multiStatementPool(db);
  // On Galera the acks run on the main pool (one statement at a time): the other stays empty.
  if (ackPool !== db && knownGalera.get(db) !== true) pools.push({ pool: 'ack', stats: poolStats(ackPool) });
  return pools.flatMap(({ pool, stats }) => (stats ? [{ pool, stats }] : []));
}

/** The key of the transaction advisory lock under which PostgreSQL migrators create the migration lock's table. */
const MIGRATION_LOCK_KEY = 0x726f6c6c; // "roll"

/**
 * Runs `sql`, a CREATE TABLE IF NOT EXISTS, so that migrators doing it at once do not collide. On
 * PostgreSQL two of them racing fail one with a duplicate key in the catalog, so they take turns
 * under an advisory lock of the transaction, waited for without LOCK_TIMEOUT. Not a session's: a
 * pooler in transaction mode (DB_POOLER) lends a server session only for a transaction, and a
 * session lock would stay with that session, held for whoever borrows it next. MySQL and SQLite
 * create such a table once whatever the race (Galera runs DDL in total order).
 */
export async function createTableInTurn(db: Db, sql: string): Promise<void> {
  if (profileOf(db).name !== 'postgres') {
    await db.raw(sql);
    return;
  }
  await db.transaction(async (trx) => {
    await trx.raw("SELECT set_config('lock_timeout', '0', true), pg_advisory_xact_lock(?)", [MIGRATION_LOCK_KEY]);
    await trx.raw(sql);
  });
}
