import { randomBytes } from 'node:crypto';

import knex, { Knex } from 'knex';

/**
 * A fresh database on a running Citus cluster (a coordinator and its workers, as its `postgres`
 * database lists them). Citus does not propagate CREATE DATABASE: the database and
 * the extension are made on every node, and the workers are registered in the new database.
 */
const admin = (url: string) => knex({ client: 'pg', connection: { connectionString: url }, pool: { min: 0, max: 1 } });

async function withAdmin<T>(url: string, work: (db: Knex) => Promise<T>): Promise<T> {
  const db = admin(url);
  try {
    return await work(db);
  } finally {
    await db.destroy();
  }
}

const withDatabase = (serverUrl: string, name: string): string => {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
};

interface NodeAddress {
  node_name: string;
  node_port: number;
}

export async function createCitusDatabase(coordinatorUrl: string, lockTimeoutMs: number): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `rollcall_test_${randomBytes(6).toString('hex')}`;
  const workers = await withAdmin(coordinatorUrl, async (db) => {
    await db.raw('CREATE DATABASE ??', [name]);
    return (await db.raw('SELECT node_name, node_port FROM citus_get_active_worker_nodes()')).rows as NodeAddress[];
  });
  const workerUrls = workers.map((w) => {
    const url = new URL(coordinatorUrl);
    url.hostname = w.node_name;
    url.port = String(w.node_port);
    return url.toString();
  });
  for (const worker of workerUrls) {
    await withAdmin(worker, (db) => db.raw('CREATE DATABASE ??', [name]));
    // As docs/scaling.md tells operators: the coordinator's per-session lock_timeout (LOCK_TIMEOUT)
    // does not reach the workers, where the row locks are waited for; they get the same value.
    await withAdmin(worker, (db) => db.raw(`ALTER DATABASE ?? SET lock_timeout = '${Math.round(lockTimeoutMs)}ms'`, [name]));
    await withAdmin(withDatabase(worker, name), (db) => db.raw('CREATE EXTENSION citus'));
  }
  const url = withDatabase(coordinatorUrl, name);
  const coordinator = new URL(coordinatorUrl);
  await withAdmin(url, async (db) => {
    await db.raw('CREATE EXTENSION citus');
    await db.raw('SELECT citus_set_coordinator_host(?, ?)', [coordinator.hostname, Number(coordinator.port || 5432)]);
    for (const w of workers) await db.raw('SELECT citus_add_node(?, ?)', [w.node_name, w.node_port]);
  });
  return {
    url,
    async drop() {
      for (const server of [coordinatorUrl, ...workerUrls]) await withAdmin(server, (db) => db.raw('DROP DATABASE IF EXISTS ?? WITH (FORCE)', [name]));
    },
  };
}
