import { randomBytes } from 'node:crypto';

import knex, { Knex } from 'knex';

import { processesNamed } from './cpu';

export const MYSQL_URL = process.env.BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
export const PG_URL = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** How to make and drop a database on one kind of server, through knex. */
interface Server {
  client: 'mysql2' | 'pg';
  adminUrl: string;
  connection(url: string): Knex.Config['connection'];
  drop: string;
}

const MARIADB: Server = {
  client: 'mysql2',
  adminUrl: MYSQL_URL,
  connection: (url) => ({ uri: url }) as never,
  drop: 'DROP DATABASE ??',
};

const POSTGRES: Server = {
  client: 'pg',
  adminUrl: PG_URL,
  connection: (url) => ({ connectionString: url }),
  // The service may still hold a pooled connection while it stops.
  drop: 'DROP DATABASE ?? WITH (FORCE)',
};

/** A fresh database on `server` for one run (its URL and a small knex pool on it), dropped afterwards. */
async function withFreshDatabase<T>(server: Server, work: (url: string, db: Knex) => Promise<T>): Promise<T> {
  const name = `rollcall_bench_${randomBytes(4).toString('hex')}`;
  const admin = knex({ client: server.client, connection: server.connection(server.adminUrl), pool: { min: 0, max: 1 } });
  await admin.raw('CREATE DATABASE ??', [name]);
  const url = new URL(server.adminUrl);
  url.pathname = `/${name}`;
  const db = knex({ client: server.client, connection: server.connection(url.toString()), pool: { min: 0, max: 2 } });
  try {
    return await work(url.toString(), db);
  } finally {
    try {
      await db.destroy();
    } finally {
      await admin.raw(server.drop, [name]).finally(() => admin.destroy());
    }
  }
}

/** The database servers' processes on this machine, for the CPU the BullMQ rounds account for. */
export const MARIADB_SERVER = processesNamed('MariaDB', 'mariadbd|mysqld');
export const POSTGRES_SERVER = processesNamed('PostgreSQL', 'postgres');

/** A fresh MariaDB database (BENCH_MYSQL_URL) for one run, dropped afterwards. */
export const withMariadbDatabase = <T>(work: (url: string, db: Knex) => Promise<T>): Promise<T> => withFreshDatabase(MARIADB, work);

/** A fresh PostgreSQL database (BENCH_PG_URL) for one run, dropped afterwards. */
export const withPostgresDatabase = <T>(work: (url: string, db: Knex) => Promise<T>): Promise<T> => withFreshDatabase(POSTGRES, work);
