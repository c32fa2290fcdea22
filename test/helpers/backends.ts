import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import knex from 'knex';

import { Config, loadConfig } from '../../src/config';

/**
 * A database a test file owns alone: a new SQLite file, or a new MariaDB database created on the
 * server named by TEST_MYSQL_URL. `config` points the service at it.
 */
export interface TestDatabase {
  name: 'sqlite' | 'mysql';
  config: Config;
  drop(): Promise<void>;
}

export type Backend = { name: 'sqlite' | 'mysql'; create(overrides?: Record<string, string>): Promise<TestDatabase> };

const mysqlUrl = process.env.TEST_MYSQL_URL;

const sqlite: Backend = {
  name: 'sqlite',
  async create(overrides = {}) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-test-'));
    const config = loadConfig({ LOG_LEVEL: 'silent', SQLITE_PATH: path.join(dir, 'test.sqlite'), ...overrides });
    return { name: 'sqlite', config, drop: async () => fs.rmSync(dir, { recursive: true, force: true }) };
  },
};

const mysql: Backend = {
  name: 'mysql',
  async create(overrides = {}) {
    const server = new URL(mysqlUrl as string);
    const name = `rollcall_test_${randomBytes(6).toString('hex')}`;
    const admin = knex({ client: 'mysql2', connection: { uri: server.toString() } as never, pool: { min: 0, max: 1 } });
    try {
      await admin.raw(`CREATE DATABASE \`${name}\``);
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
};

/** How a spawned service process finds a test's database. */
export function processEnv(database: TestDatabase): Record<string, string> {
  return database.config.DATABASE_URL ? { DATABASE_URL: database.config.DATABASE_URL } : { SQLITE_PATH: database.config.SQLITE_PATH };
}

/** SQLite always; MariaDB too when TEST_MYSQL_URL is set (.ci/run sets it and insists it answers). */
export function backends(): Array<[name: string, backend: Backend]> {
  return (mysqlUrl ? [sqlite, mysql] : [sqlite]).map((backend) => [backend.name, backend]);
}

export function mysqlBackend(): Backend | null {
  return mysqlUrl ? mysql : null;
}
