/**
 * The figures of docs/scaling.md: ack throughput with 1, 2 and 3 service replicas (spawned
 * processes) on one MariaDB, and with 3 replicas on a 3-node Galera cluster, multi-primary (one
 * replica per node) and single-writer (all through HAProxy). Not part of `npm run bench`.
 *
 *   npx tsx bench/scaling.ts replicas   # needs TEST_MYSQL_URL (a server it may create databases on)
 *   npx tsx bench/scaling.ts galera     # starts its own cluster (galera-4, haproxy, rsync)
 *   npx tsx bench/scaling.ts citus      # plain PostgreSQL (TEST_PG_URL) beside a Citus cluster of its
 *                                       # own (coordinator + 2 workers; Citus built locally)
 *
 * Load: 24 clients, calls of 10 IDs, spread over the replicas round-robin; "hot" acks one batch of
 * 12,000 items, "spread" 24 batches of 500 (one per client). Retries on 503 as a client would.
 */
import { randomBytes } from 'node:crypto';

import mysql from 'mysql2/promise';

import { createPgDatabase } from '../test/helpers/backends';
import { createCitusDatabase } from '../test/helpers/citusCluster';
import { GaleraCluster } from '../test/helpers/galeraCluster';
import { call, ServiceProcess, spawnService } from '../test/helpers/processes';

// The private Citus cluster of the tests' TEST_CITUS=1 (a plain JS module, shared with jest's globalSetup).
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { startCitusCluster, stopCitusCluster } = require('../test/citusCluster') as {
  startCitusCluster(): Promise<{ url: string }>;
  stopCitusCluster(cluster: { url: string }): void;
};

const CLIENTS = 24;
const PER_CALL = 10;

async function createDatabase(serverUrl: string): Promise<string> {
  const name = `rollcall_scaling_${randomBytes(4).toString('hex')}`;
  const conn = await mysql.createConnection({ uri: serverUrl });
  await conn.query(`CREATE DATABASE \`${name}\``);
  await conn.end();
  return name;
}

async function dropDatabase(serverUrl: string, name: string): Promise<void> {
  const conn = await mysql.createConnection({ uri: serverUrl });
  await conn.query(`DROP DATABASE IF EXISTS \`${name}\``);
  await conn.end();
}

function withDb(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

async function sealed(base: string, count: number): Promise<string[]> {
  const id = (await call(`${base}/v1/batches`, 'POST', {})).body.id as string;
  const ids: string[] = [];
  for (let left = count; left > 0; left -= 10_000) {
    const added = await call(`${base}/v1/batches/${id}/items`, 'POST', { count: Math.min(left, 10_000) });
    for (const g of added.body.groups as Array<{ id: string; size: number }>) for (let i = 0; i < g.size; i++) ids.push(`${id}:${g.id}:${i}`);
  }
  await call(`${base}/v1/batches/${id}/seal`, 'POST', {});
  return ids;
}

/** Acks every ID once; returns calls per second and how many 503s were retried. */
async function load(services: ServiceProcess[], shape: 'hot' | 'spread'): Promise<{ callsPerSecond: number; retried503: number }> {
  const perClient: string[][] = [];
  if (shape === 'hot') {
    const ids = await sealed(services[0]!.url, 12_000);
    for (let c = 0; c < CLIENTS; c++) perClient.push(ids.filter((_, i) => i % CLIENTS === c));
  } else {
    for (let c = 0; c < CLIENTS; c++) perClient.push(await sealed(services[c % services.length]!.url, 500));
  }
  let calls = 0;
  let retried503 = 0;
  const started = Date.now();
  await Promise.all(
    perClient.map(async (ids, c) => {
      const base = services[c % services.length]!.url;
      for (let i = 0; i < ids.length; i += PER_CALL) {
        for (;;) {
          const res = await call(`${base}/v1/acks`, 'POST', { ids: ids.slice(i, i + PER_CALL) });
          if (res.status === 200) break;
          if (res.status !== 503) throw new Error(`ack answered ${res.status}: ${JSON.stringify(res.body)}`);
          retried503++;
          await new Promise((r) => setTimeout(r, 10));
        }
        calls++;
      }
    }),
  );
  return { callsPerSecond: Math.round(calls / ((Date.now() - started) / 1000)), retried503 };
}

async function measure(label: string, urls: string[]): Promise<void> {
  // One after another: concurrent first starts are tested elsewhere; here they would only add noise.
  const services: ServiceProcess[] = [];
  for (const url of urls) services.push(await spawnService({ DATABASE_URL: url }));
  try {
    for (const shape of ['hot', 'spread'] as const) {
      const result = await load(services, shape);
      console.log(
        `${label.padEnd(44)} ${shape.padEnd(6)} ${String(result.callsPerSecond).padStart(6)} ack calls/s (${result.callsPerSecond * PER_CALL} IDs/s), 503s retried: ${result.retried503}`,
      );
    }
  } finally {
    await Promise.all(services.map((s) => s.stop()));
  }
}

async function replicas(): Promise<void> {
  const server = process.env.TEST_MYSQL_URL;
  if (!server) throw new Error('TEST_MYSQL_URL is not set');
  for (const n of [1, 2, 3]) {
    const name = await createDatabase(server);
    try {
      await measure(
        `${n} replica(s), one MariaDB`,
        Array.from({ length: n }, () => withDb(server, name)),
      );
    } finally {
      await dropDatabase(server, name);
    }
  }
}

async function galera(): Promise<void> {
  const cluster = new GaleraCluster();
  try {
    await cluster.start(3);
    await cluster.startHaproxy();
    const name = `rollcall_scaling_${randomBytes(4).toString('hex')}`;
    await cluster.createDatabase(name);
    await measure(
      'Galera, 3 replicas on 3 nodes (multi-primary)',
      cluster.nodes.map((n) => n.url(name)),
    );
    const proxied = `mysql://root@127.0.0.1:${cluster.haproxyPort}/${name}`;
    await measure('Galera, 3 replicas via HAProxy (one writer)', [proxied, proxied, proxied]);
  } finally {
    await cluster.stop();
  }
}

/** 3 replicas on plain PostgreSQL, then on a Citus coordinator with 2 workers (batches sharded by id). */
async function citus(): Promise<void> {
  const server = process.env.TEST_PG_URL;
  if (!server) throw new Error('TEST_PG_URL is not set');
  const plain = await createPgDatabase(server);
  try {
    await measure('3 replicas, one PostgreSQL 15', [plain.url, plain.url, plain.url]);
  } finally {
    await plain.drop();
  }
  const cluster = await startCitusCluster();
  try {
    const sharded = await createCitusDatabase(cluster.url, 2000); // the service's default LOCK_TIMEOUT
    await measure('3 replicas, Citus 13 (coordinator + 2 workers)', [sharded.url, sharded.url, sharded.url]);
    await sharded.drop();
  } finally {
    stopCitusCluster(cluster);
  }
}

const modes: Record<string, () => Promise<void>> = { galera, citus, replicas };
(modes[process.argv[2] ?? 'replicas'] ?? replicas)().catch((error) => {
  console.error(error);
  process.exit(1);
});
