import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import knex from 'knex';

import { Config, loadConfig } from '../../src/config';
import { createCitusDatabase } from './citusCluster';

/**
 * A database a test file owns alone: a new SQLite file, or a new database created on the MariaDB
 * server named by TEST_MYSQL_URL or the PostgreSQL server named by TEST_PG_URL. `config` points the
 * service at it.
 */
export type BackendName = 'sqlite' | 'mysql' | 'pg' | 'pgbouncer' | 'citus' | 'pg-citus-forms';

/** The backends that are PostgreSQL underneath: the server itself, PgBouncer in front of it, Citus, Citus's forms. */
export const isPostgresBackend = (name: string): boolean => name === 'pg' || name === 'pgbouncer' || name === 'citus' || name === 'pg-citus-forms';

export interface TestDatabase {
  name: BackendName;
  config: Config;
  drop(): Promise<void>;
  /** The service on it takes Citus's statement forms (useCitusForms): `pg-citus-forms`. */
  citusForms?: true;
}

export type Backend = { name: BackendName; create(overrides?: Record<string, string>): Promise<TestDatabase> };

const mysqlUrl = process.env.TEST_MYSQL_URL;
const pgUrl = process.env.TEST_PG_URL;
const citusUrl = process.env.TEST_CITUS_URL;
const pgbouncerUrl = process.env.TEST_PGBOUNCER_URL;

const sqlite: Backend = {
  name: 'sqlite',
  async create(overrides = {}) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-test-'));
    const config = loadConfig({ LOG_LEVEL: 'silent', SQLITE_PATH: path.join(dir, 'test.sqlite'), ...overrides });
    return { name: 'sqlite', config, drop: async () => fs.rmSync(dir, { recursive: true, force: true }) };
  },
};

/** A MariaDB backend whose databases are made with `options` (`CHARACTER SET latin1`, say). */
const mysqlWith = (options = ''): Backend => ({
  name: 'mysql',
  async create(overrides = {}) {
    const server = new URL(mysqlUrl as string);
    const name = `rollcall_test_${randomBytes(6).toString('hex')}`;
    const admin = knex({ client: 'mysql2', connection: { uri: server.toString() } as never, pool: { min: 0, max: 1 } });
    try {
      await admin.raw(`CREATE DATABASE \`${name}\` ${options}`);
    } finally {
      await admin.destroy();
    }
    const url = new URL(server.toString());
    url.pathname = `/${name}`;
    const config = loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: url.toString(), ...overrides });
    return {
      name: 'mysql',
      config,
      async drop() {
        const cleanup = knex({ client: 'mysql2', connection: { uri: server.toString() } as never, pool: { min: 0, max: 1 } });
        try {
          await cleanup.raw(`DROP DATABASE IF EXISTS \`${name}\``);
        } finally {
          await cleanup.destroy();
        }
      },
    };
  },
});

const mysql = mysqlWith();

/** A one-connection admin handle on the PostgreSQL server (database `postgres` of TEST_PG_URL's server). */
const pgAdmin = (server: string) => knex({ client: 'pg', connection: { connectionString: server }, pool: { min: 0, max: 1 } });

/** Creates a database on the PostgreSQL server of `serverUrl`; returns its URL and how to drop it. */
export async function createPgDatabase(serverUrl: string, options = ''): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `rollcall_test_${randomBytes(6).toString('hex')}`;
  const admin = pgAdmin(serverUrl);
  try {
    await admin.raw(`CREATE DATABASE ?? ${options}`, [name]);
  } finally {
    await admin.destroy();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const cleanup = pgAdmin(serverUrl);
      try {
        // FORCE ends sessions a killed service process may have left behind.
        await cleanup.raw('DROP DATABASE IF EXISTS ?? WITH (FORCE)', [name]);
      } finally {
        await cleanup.destroy();
      }
    },
  };
}

/** A PostgreSQL backend whose databases are made with `options` (`ENCODING 'LATIN1' …`, say). */
const pgWith = (options = ''): Backend => ({
  name: 'pg',
  async create(overrides = {}) {
    const database = await createPgDatabase(pgUrl as string, options);
    const config = loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: database.url, ...overrides });
    return { name: 'pg', config, drop: () => database.drop() };
  },
});

const pg = pgWith();

/**
 * Plain PostgreSQL whose service takes Citus's statement forms (useCitusForms: per-batch locking
 * reads in the ack, the uncorrelated held-event and sweep checks, the per-batch question of held
 * batches), so they run on every commit where no Citus cluster does. Only in the suites that ask
 * for it (withCitusForms), through startService and its kin.
 */
const pgCitusForms: Backend = {
  name: 'pg-citus-forms',
  async create(overrides = {}) {
    return { ...(await pg.create(overrides)), name: 'pg-citus-forms', citusForms: true };
  },
};

/** `rows` and, where PostgreSQL runs, `pg-citus-forms`: for the suites of the paths whose statements differ on Citus. */
export function withCitusForms(rows: Array<[name: string, backend: Backend]>): Array<[name: string, backend: Backend]> {
  return pgUrl && !citusUrl ? [...rows, [pgCitusForms.name, pgCitusForms]] : rows;
}

/** PostgreSQL with databases in LATIN1, not UTF8 (made from template0, with a locale that takes any encoding). */
export function latin1PgBackend(): Backend | null {
  return pgUrl ? pgWith("ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0") : null;
}

/**
 * A database on TEST_PG_URL's server that the service reaches through the PgBouncer of
 * TEST_PGBOUNCER_URL, which pools in `transaction` mode (test/pgbouncer.js): the service
 * runs with DB_POOLER=transaction, as docs/operations.md tells its users to.
 */
const pgbouncer: Backend = {
  name: 'pgbouncer',
  async create(overrides = {}) {
    const database = await createPgDatabase(pgUrl as string);
    const url = new URL(pgbouncerUrl as string);
    url.pathname = new URL(database.url).pathname;
    const config = loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: url.toString(), DB_POOLER: 'transaction', ...overrides });
    return { name: 'pgbouncer', config, drop: () => database.drop() };
  },
};

const citus: Backend = {
  name: 'citus',
  async create(overrides = {}) {
    // The workers wait for row locks as long as the service's LOCK_TIMEOUT says (docs/scaling.md).
    const lockTimeoutMs = loadConfig({ LOG_LEVEL: 'silent', ...overrides }).LOCK_TIMEOUT;
    const database = await createCitusDatabase(citusUrl as string, lockTimeoutMs);
    const config = loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: database.url, ...overrides });
    return { name: 'citus', config, drop: () => database.drop() };
  },
};

/** How a spawned service process finds a test's database. */
export function processEnv(database: TestDatabase): Record<string, string> {
  const { DATABASE_URL, DB_POOLER, SQLITE_PATH } = database.config;
  return DATABASE_URL ? { DATABASE_URL, DB_POOLER } : { SQLITE_PATH };
}

/**
 * SQLite always; MariaDB when TEST_MYSQL_URL is set, PostgreSQL when TEST_PG_URL is set (.ci/run
 * sets both and insists they answer); a Citus cluster's coordinator when TEST_CITUS_URL is set
 * (test/helpers/citusCluster.ts; not in CI, Citus is not in Debian's packages).
 */
export function backends(): Array<[name: string, backend: Backend]> {
  return [sqlite, ...(mysqlUrl ? [mysql] : []), ...(pgUrl ? [pg] : []), ...(pgUrl && pgbouncerUrl ? [pgbouncer] : []), ...(citusUrl ? [citus] : [])].map(
    (backend) => [backend.name, backend],
  );
}

export function mysqlBackend(): Backend | null {
  return mysqlUrl ? mysql : null;
}

/**
 * MariaDB with databases whose default character set is latin1: upstream MariaDB's default before
 * 11.6 (Debian's packages and MySQL 8 default to utf8mb4), which tables made without one take.
 */
export function latin1MysqlBackend(): Backend | null {
  return mysqlUrl ? mysqlWith('CHARACTER SET latin1') : null;
}

export function pgBackend(): Backend | null {
  return pgUrl ? pg : null;
}

/** The server backends (MariaDB, PostgreSQL) that are set, for tests of what only a server does. */
export function serverBackends(): Array<[name: string, backend: Backend]> {
  return backends().filter(([name]) => name !== 'sqlite');
}

/**
 * `describe.each(rows)`, or one skipped describe when `rows` is empty (jest refuses an empty table):
 * for suites of backends that only some runs have (`.ci/run` sets them all and insists they answer).
 */
export function describeEachOrSkip<Row extends readonly [string, ...unknown[]]>(rows: Row[]) {
  return rows.length > 0 ? describe.each(rows) : describe.skip.each([['none', null] as unknown as Row]);
}
