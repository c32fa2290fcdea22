import { randomBytes } from 'node:crypto';

import knex, { Knex } from 'knex';

export const MYSQL_URL = process.env.BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

/** A fresh MariaDB database for one run, dropped afterwards. */
export async function withDatabase<T>(work: (url: string, db: Knex) => Promise<T>): Promise<T> {
  const name = `rollcall_bench_${randomBytes(4).toString('hex')}`;
  const admin = knex({ client: 'mysql2', connection: { uri: MYSQL_URL } as never, pool: { min: 0, max: 1 } });
  await admin.raw(`CREATE DATABASE \`${name}\``);
  const url = new URL(MYSQL_URL);
  url.pathname = `/${name}`;
  const db = knex({ client: 'mysql2', connection: { uri: url.toString() } as never, pool: { min: 0, max: 2 } });
  try {
    return await work(url.toString(), db);
  } finally {
    await db.destroy();
    await admin.raw(`DROP DATABASE \`${name}\``);
    await admin.destroy();
  }
}
