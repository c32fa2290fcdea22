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

/** Opens the configured database: MySQL/MariaDB when DATABASE_URL is set, else an embedded SQLite file. */
export function openDb(config: Pick<Config, 'DATABASE_URL' | 'SQLITE_PATH' | 'DB_POOL_SIZE'>, log?: Logger): Db {
  if (config.DATABASE_URL) {
    return knex({
      log: knexLog(log),
      client: 'mysql2',
      // multipleStatements lets an ack transaction take two round trips (readDecideWrite.ts);
      // every value is still bound by knex, never spliced into the SQL text.
      connection: { uri: config.DATABASE_URL.replace(/^mysql2:/, 'mysql:'), supportBigNumbers: true, connectTimeout: 5000, multipleStatements: true },
      pool: { min: 0, max: config.DB_POOL_SIZE },
      acquireConnectionTimeout: 5000,
    } as Knex.Config);
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
        // answered ack survives a power loss; the busy timeout makes other processes wait, not fail.
        conn.pragma('journal_mode = WAL');
        conn.pragma('synchronous = FULL');
        conn.pragma('busy_timeout = 5000');
        conn.pragma('foreign_keys = ON');
        done(null, conn);
      },
    },
  });
}
