import fs from 'node:fs';
import path from 'node:path';
import knex, { Knex } from 'knex';
import type { Logger } from 'pino';
import type { Config } from '../config';

export type Db = Knex;
/** Anything that runs a query: the pool or an open transaction. */
export type Queryable = Knex | Knex.Transaction;

export type Dialect = 'mysql' | 'sqlite';

export function dialectOf(db: Queryable): Dialect {
  const client = db.client.config.client as string;
  return client === 'mysql2' || client === 'mysql' ? 'mysql' : 'sqlite';
}

/** knex's own messages (connection errors, warnings) go to the service log, not the console. */
function knexLog(log?: Logger): Knex.Config['log'] {
  const write = (level: 'warn' | 'error' | 'debug') => (message: unknown) => log?.[level]({ knex: String(message) }, 'knex');
  return { warn: write('warn'), error: write('error'), deprecate: write('warn'), debug: write('debug') };
}

export type DbConfig = Pick<Config, 'DATABASE_URL' | 'SQLITE_PATH' | 'DB_POOL_SIZE' | 'LOCK_TIMEOUT'>;

/**
 * The sql_mode of every MySQL connection, whatever the server's default. Without
 * NO_BACKSLASH_ESCAPES (and ANSI_QUOTES) the driver's escaping of bound values is exact; with it, a
 * crafted string could end its literal early (docs/security.md).
 */
const SAFE_SQL_MODE = 'STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

interface MysqlSession {
  query(sql: string, values: unknown[], callback: (error: Error | null, rows?: unknown) => void): void;
}

/** Lock waits end after LOCK_TIMEOUT (InnoDB counts whole seconds, at least one). */
const lockWaitSeconds = (lockTimeoutMs: number) => Math.max(1, Math.ceil(lockTimeoutMs / 1000));

/**
 * On a Galera node (wsrep_on), a session whose reads must see what other nodes committed waits for
 * the cluster's causality before each read (wsrep_sync_wait=1: SELECT, SHOW, BEGIN): a status read
 * or /wait on node B right after an ack answered on node A sees that ack. Elsewhere (plain MariaDB,
 * MySQL, where the variable may not exist) nothing is set.
 */
function syncWaitOnGalera(conn: MysqlSession, done: (err: Error | null) => void): void {
  conn.query("SHOW VARIABLES LIKE 'wsrep_on'", [], (err, rows) => {
    if (err) return done(err);
    const on = Array.isArray(rows) && rows.some((row: { Value?: unknown }) => String(row.Value).toUpperCase() === 'ON');
    if (!on) return done(null);
    conn.query('SET SESSION wsrep_sync_wait = 1', [], (setErr) => done(setErr));
  });
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
    connection: { uri: (config.DATABASE_URL as string).replace(/^mysql2:/, 'mysql:'), supportBigNumbers: true, connectTimeout: 5000, multipleStatements },
    pool: {
      min: 0,
      max: config.DB_POOL_SIZE,
      afterCreate(conn: MysqlSession, done: (err: Error | null, conn: unknown) => void) {
        conn.query('SET SESSION sql_mode = ?, innodb_lock_wait_timeout = ?', [SAFE_SQL_MODE, lockWaitSeconds(config.LOCK_TIMEOUT)], (err) => {
          if (err || !causalReads) return done(err, conn);
          syncWaitOnGalera(conn, (syncErr) => done(syncErr, conn));
        });
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
  return dialectOf(db) === 'sqlite' ? 1 : Number((db.client.config.pool as { max?: number } | undefined)?.max ?? 1);
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

/**
 * True when the database is a Galera cluster node (wsrep_on=ON), asked once per pool. MySQL, which
 * has no such variable, answers with no row.
 */
export function onGalera(db: Db): Promise<boolean> {
  if (dialectOf(db) !== 'mysql') return Promise.resolve(false);
  let check = galeraChecks.get(db);
  if (!check) {
    check = db.raw("SHOW VARIABLES LIKE 'wsrep_on'").then(([rows]: [Array<{ Value?: unknown }>]) => rows.some((row) => String(row.Value).toUpperCase() === 'ON'));
    check.catch(() => galeraChecks.delete(db)); // not answering now: ask again next time
    galeraChecks.set(db, check);
  }
  return check;
}

/** Opens the configured database: MySQL/MariaDB when DATABASE_URL is set, else an embedded SQLite file. */
export function openDb(config: DbConfig, log?: Logger): Db {
  if (config.DATABASE_URL) return openMysql(config, log);
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
        // answered ack survives a power loss; the busy timeout makes other processes wait, not
        // fail, for up to LOCK_TIMEOUT.
        conn.pragma('journal_mode = WAL');
        conn.pragma('synchronous = FULL');
        conn.pragma(`busy_timeout = ${config.LOCK_TIMEOUT}`);
        conn.pragma('foreign_keys = ON');
        done(null, conn);
      },
    },
  });
}
