/**
 * `npm run bench`: rollcall on MariaDB and on PostgreSQL driven over HTTP, next to its peers on the
 * same machine (an express no-op endpoint = the HTTP ceiling, BullMQ flows on Redis, BullMQ end to end
 * with and without rollcallProcessor — alone: `npm run bench:bullmq`). Prints a table
 * and writes docs/benchmarks.md. Environment: BENCH_MYSQL_URL (default
 * mysql://root@127.0.0.1:3306/test), BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432/postgres),
 * BENCH_PG=off to measure MariaDB alone.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

import { Knex } from 'knex';

import { call, FROM_BUILD, ServiceProcess, spawnService } from '../test/helpers/processes';
import { BullmqEndToEndResult, describeCpu, runBullmqEndToEnd } from './lib/bullmqEndToEnd';
import { BULLMQ_VERSION, runBullmq } from './lib/bullmqPeer';
import { ClaimReads, measureClaimReads } from './lib/claimReads';
import { Accounted } from './lib/cpu';
import { MARIADB_SERVER, POSTGRES_SERVER, withMariadbDatabase, withPostgresDatabase } from './lib/database';
import { sequentialLatency } from './lib/latency';
import { load, LoadResult } from './lib/load';
import { describeMachine, peakRssMiB } from './lib/machine';

const ROOT = path.resolve(__dirname, '..');
const BATCHED_ITEMS = Number(process.env.BENCH_BATCHED_ITEMS ?? 2_000_000);
const BULLMQ_E2E_JOBS = Number(process.env.BENCH_E2E_JOBS ?? 20_000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const SINGLE_ROUNDS = Number(process.env.BENCH_SINGLE_ROUNDS ?? 3);
const BULLMQ_CHILDREN = Number(process.env.BENCH_BULLMQ_CHILDREN ?? 20_000);

type Group = { id: string; size: number };

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j] as T, items[i] as T];
  }
  return items;
}

const idsBody = (prefix: string, from: number, count: number): string => {
  const ids = new Array<string>(count);
  for (let i = 0; i < count; i++) ids[i] = prefix + (from + i);
  return `{"ids":["${ids.join('","')}"]}`;
};

async function openBatch(url: string, count: number): Promise<{ id: string; groups: Group[]; addMs: number }> {
  const id = (await call(`${url}/v1/batches`, 'POST', { userKey: 'bench' })).body.id as string;
  const started = performance.now();
  const added = await call(`${url}/v1/batches/${id}/items`, 'POST', { count });
  const addMs = performance.now() - started;
  if (added.status !== 201) throw new Error(`add failed: ${JSON.stringify(added.body)}`);
  return { id, groups: added.body.groups, addMs };
}

/** Chunks of `size` consecutive items of one group, in random order: a worker acking the slice it processed. */
function sliceChunks(batchId: string, groups: Group[], size: number): string[] {
  const chunks: Array<[string, number, number]> = [];
  for (const g of groups) for (let from = 0; from < g.size; from += size) chunks.push([`${batchId}:${g.id}:`, from, Math.min(size, g.size - from)]);
  return shuffle(chunks).map(([prefix, from, count]) => idsBody(prefix, from, count));
}

function check(result: LoadResult, what: string): LoadResult {
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${what}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
  return result;
}

/** The express no-op; `server: 'rollcall'` serves it the way rollcall serves its app. */
async function startNoop(server: 'express' | 'rollcall' = 'express'): Promise<{ url: string; stop(): void }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/lib/noopServer.ts'], {
    cwd: ROOT,
    env: { ...process.env, NOOP_SERVER: server },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<string>((resolve) => {
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^ROLLCALL_PORT=(\d+)$/.exec(line);
      if (m) resolve(m[1]!);
    });
  });
  return { url: `http://127.0.0.1:${port}`, stop: () => child.kill('SIGTERM') };
}

/** A database server the bench runs rollcall on: a fresh database for the run, and how to read its storage. */
interface BenchDatabase {
  name: 'MariaDB' | 'PostgreSQL';
  withDatabase<T>(work: (url: string, db: Knex) => Promise<T>): Promise<T>;
  version(db: Knex): Promise<string>;
  /** Bytes the item_groups table takes on disk (rows, pages, indexes), after the server's own upkeep. */
  tableBytes(db: Knex): Promise<number>;
  /** The server's processes, whose CPU the BullMQ rounds at each side's fastest account for. */
  server: Accounted;
}

const mariadb: BenchDatabase = {
  name: 'MariaDB',
  withDatabase: withMariadbDatabase,
  server: MARIADB_SERVER,
  async version(db) {
    return String(((await db.raw('SELECT VERSION() v')) as Array<Array<{ v: string }>>)[0]![0]!.v);
  },
  async tableBytes(db) {
    await db.raw('ANALYZE TABLE item_groups');
    const [[sizes]] = (await db.raw(
      `SELECT data_length d, index_length i FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'item_groups'`,
    )) as [[{ d: number; i: number }]];
    return Number(sizes.d) + Number(sizes.i);
  },
};

const postgres: BenchDatabase = {
  name: 'PostgreSQL',
  withDatabase: withPostgresDatabase,
  server: POSTGRES_SERVER,
  async version(db) {
    return String(((await db.raw('SHOW server_version')) as { rows: Array<{ server_version: string }> }).rows[0]!.server_version);
  },
  async tableBytes(db) {
    // Every ack rewrites its group rows (MVCC): VACUUM makes the dead versions' space reusable, as autovacuum would.
    await db.raw('VACUUM (ANALYZE) item_groups');
    return Number(((await db.raw(`SELECT pg_total_relation_size('item_groups') t`)) as { rows: Array<{ t: string }> }).rows[0]!.t);
  },
};

type NoopServer = { url: string; stop(): void };

/** What one run of rollcall on one database measured. */
interface Figures {
  database: BenchDatabase['name'];
  version: string;
  addMs: number;
  coldStatus: Latency;
  coldHealth: Latency;
  statusLoaded: LoadResult;
  compact: LoadResult;
  payloadBits: number;
  diskBits: number;
  diskBytesForBatch: number;
  groupRows: number;
  batchedRun: LoadResult;
  itemAcksPerSecond: number;
  rounds: Array<{ rollcall: LoadResult; noop: LoadResult; servedAlike: LoadResult }>;
  status: Latency;
  /** BullMQ end to end against this database's service; its instant-endpoint and beside rounds with the first database only. */
  endToEnd?: BullmqEndToEndResult;
  health: Latency;
  mergeFactor: number;
  rssMiB: number;
  claimReads: ClaimReads;
}

type Latency = Awaited<ReturnType<typeof sequentialLatency>>;

/** Adds 10M items three times (median time) and reads that batch's status cold and under load. */
async function measureAdds(url: string) {
  const adds = [];
  for (let i = 0; i < 3; i++) adds.push(await openBatch(url, 10_000_000));
  const addMs = adds.map((a) => a.addMs).sort((a, b) => a - b)[1]!;
  const big = adds[0]!;
  // Read right after start, this measures V8 still compiling the read path; it is read again, warm, after the ack loads.
  const coldStatus = await sequentialLatency(`${url}/v1/batches/${big.id}`, 5000);
  const coldHealth = await sequentialLatency(`${url}/healthz`, 5000);
  const statusLoaded = check(await load({ url: `${url}/v1/batches/${big.id}`, method: 'GET', connections: 16, duration: 5 }), 'status, 16 clients');
  return { addMs, big, coldStatus, coldHealth, statusLoaded };
}

/** The compact-form bodies (10,000 items a call) that ack every item of a batch. */
function compactBodiesOf(batchId: string, groups: Group[]): string[] {
  const bodies: string[] = [];
  let entries: string[] = [];
  let inCall = 0;
  for (const g of groups) {
    for (let from = 0; from < g.size;) {
      const take = Math.min(g.size - from, 10_000 - inCall);
      entries.push(`{"batchId":"${batchId}","groupId":"${g.id}","indexes":[[${from},${from + take - 1}]]}`);
      from += take;
      inCall += take;
      if (inCall === 10_000) {
        bodies.push(`{"groups":[${entries.join(',')}]}`);
        entries = [];
        inCall = 0;
      }
    }
  }
  if (entries.length) bodies.push(`{"groups":[${entries.join(',')}]}`);
  return bodies;
}

/** Acks every item of the 10M batch, then measures what its group rows take. */
async function measureStorage(url: string, database: BenchDatabase, db: Knex, big: { id: string; groups: Group[] }) {
  await call(`${url}/v1/batches/${big.id}/seal`, 'POST', {});
  const bodies = compactBodiesOf(big.id, big.groups);
  const compact = check(await load({ url: `${url}/v1/acks`, connections: 16, amount: bodies.length, body: () => bodies.pop()! }), 'compact acks');
  const done = (await call(`${url}/v1/batches/${big.id}`, 'GET')).body;
  if (done.state !== 'complete' || done.succeeded !== 10_000_000) throw new Error(`10M batch not complete: ${JSON.stringify(done)}`);
  const tableBytes = await database.tableBytes(db);
  const [payload] = (await db('item_groups')
    .where('batch_id', big.id)
    .select(db.raw('COUNT(*) n'), db.raw('SUM(LENGTH(succeeded_bits)) s'), db.raw('SUM(COALESCE(LENGTH(failed_bits), 0)) f'))) as Array<{
    n: number | string;
    s: number | string;
    f: number | string;
  }>;
  const [all] = (await db('item_groups').count({ n: '*' })) as Array<{ n: number | string }>;
  // The table also holds the two unacked 10M batches' groups (no bitfields yet): count this batch's share of rows.
  const diskBytesForBatch = (tableBytes * Number(payload!.n)) / Number(all!.n);
  return {
    compact,
    groupRows: Number(payload!.n),
    payloadBits: ((Number(payload!.s) + Number(payload!.f)) * 8) / 10_000_000,
    diskBytesForBatch,
    diskBits: (diskBytesForBatch * 8) / 10_000_000,
  };
}

/** Batched acks: 1,000 IDs a request, 16 clients. */
async function measureBatchedAcks(url: string) {
  const batched = await openBatch(url, BATCHED_ITEMS);
  await call(`${url}/v1/batches/${batched.id}/seal`, 'POST', {});
  const bodies = sliceChunks(batched.id, batched.groups, 1000);
  const batchedRun = check(await load({ url: `${url}/v1/acks`, connections: 16, amount: bodies.length, body: () => bodies.pop()! }), 'batched acks');
  const batchedState = (await call(`${url}/v1/batches/${batched.id}`, 'GET')).body;
  if (batchedState.state !== 'complete' || batchedState.succeeded !== BATCHED_ITEMS) throw new Error('batched run lost acks');
  return { batchedRun, itemAcksPerSecond: BATCHED_ITEMS / batchedRun.seconds };
}

/**
 * Single-ID ack requests, 64 clients, against the HTTP ceiling with the same loads. The machine's
 * speed drifts from minute to minute, so the two alternate in rounds and the ratio is the median of
 * the rounds' ratios.
 */
async function measureSingleAcks(url: string, noop: NoopServer, servedAlike: NoopServer) {
  const single = await openBatch(url, 3_000_000);
  const singlePrefixes = single.groups.map((g) => `${single.id}:${g.id}:`);
  const fake = '01234567-89ab-7def-8123-456789abcdef';
  let next = 0;
  let n = 0;
  const rounds: Figures['rounds'] = [];
  for (let round = 0; round < SINGLE_ROUNDS; round++) {
    rounds.push({
      rollcall: check(
        await load({
          url: `${url}/v1/acks`,
          connections: 64,
          duration: SECONDS,
          body: () => `{"ids":["${singlePrefixes[Math.floor(next / 8192)]}${next++ % 8192}"]}`,
        }),
        'single acks',
      ),
      noop: check(
        await load({ url: `${noop.url}/v1/acks`, connections: 64, duration: SECONDS, body: () => `{"ids":["${fake}:${fake}:${n++}"]}` }),
        'noop single',
      ),
      servedAlike: check(
        await load({ url: `${servedAlike.url}/v1/acks`, connections: 64, duration: SECONDS, body: () => `{"ids":["${fake}:${fake}:${n++}"]}` }),
        'noop single, served like rollcall',
      ),
    });
  }
  const answered = rounds.reduce((sum, r) => sum + r.rollcall.requests, 0);
  const singleState = (await call(`${url}/v1/batches/${single.id}`, 'GET')).body;
  // autocannon stops at each deadline without counting the requests still in flight (one per connection).
  const unanswered = singleState.succeeded - answered;
  if (unanswered < 0 || unanswered > 64 * SINGLE_ROUNDS) throw new Error(`single run: ${answered} answered, ${singleState.succeeded} recorded`);
  return rounds;
}

/** The median round by rollcall / no-op ratio. */
const medianRound = (rounds: Figures['rounds']) =>
  [...rounds].sort((a, b) => a.rollcall.rps / a.noop.rps - b.rollcall.rps / b.noop.rps)[Math.floor(rounds.length / 2)]!;

/** Runs every rollcall measure on one database, with the service built as `npm start` runs it. */
async function measureOn(database: BenchDatabase, noop: NoopServer, servedAlike: NoopServer): Promise<Figures> {
  console.log(`== ${database.name}`);
  return database.withDatabase(async (databaseUrl, db) => {
    const version = await database.version(db);
    const service: ServiceProcess = await spawnService({ DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' }, FROM_BUILD);
    const pid = service.child.pid!;
    const phase = (name: string) => console.log(`  after ${name}: service RSS peak so far ${peakRssMiB(pid).toFixed(1)} MiB`);
    const url = service.url;
    let figures: Omit<Figures, 'claimReads'>;
    try {
      const adds = await measureAdds(url);
      phase('adds and status');
      const storage = await measureStorage(url, database, db, adds.big);
      phase('compact acks of 10M');
      const batched = await measureBatchedAcks(url);
      phase('batched acks');
      const rounds = await measureSingleAcks(url, noop, servedAlike);
      phase('single-ID acks');
      const status = await sequentialLatency(`${url}/v1/batches/${adds.big.id}`, 5000);
      const health = await sequentialLatency(`${url}/healthz`, 5000);
      const metricsText = (await (await fetch(`${url}/metrics`)).text()).split('\n');
      const metric = (name: string) => Number(metricsText.find((l) => l.startsWith(`${name} `))?.split(' ')[1] ?? NaN);
      const mergeFactor = metric('rollcall_group_commit_calls_sum') / metric('rollcall_group_commit_calls_count');
      const rssMiB = peakRssMiB(pid);
      // BullMQ end to end: a no-op worker, plain and wrapped in rollcallProcessor (also alone: npm run bench:bullmq).
      // The instant-endpoint and beside rounds do not depend on the store: with the first database only.
      const first = database === DATABASES[0];
      const endToEnd = await runBullmqEndToEnd(url, BULLMQ_E2E_JOBS, undefined, { instant: first, beside: first }, [
        { name: 'service', pids: () => [pid] },
        database.server,
      ]);
      const { big: _big, ...addFigures } = adds;
      figures = { database: database.name, version, ...addFigures, ...storage, ...batched, rounds, status, health, mergeFactor, rssMiB, endToEnd };
    } finally {
      await service.stop();
    }
    // With the service stopped: its dispatcher would claim the due events the read is timed on.
    return { ...figures, claimReads: await measureClaimReads(db) };
  });
}

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

type Row = [string, string, string, string];

/** The table rows of one database's figures, each measure named with the database. */
function rowsOf(f: Figures, bull: Awaited<ReturnType<typeof runBullmq>>, noopBatched: LoadResult): Row[] {
  const on = ` — ${f.database}`;
  const single = medianRound(f.rounds);
  const ratio = f.itemAcksPerSecond / bull.completedPerSecond;
  const roundRatios = f.rounds.map((r) => fmt(r.rollcall.rps / r.noop.rps, 2)).join(', ');
  const rssMB = (f.rssMiB * 2 ** 20) / 1e6; // the target is in MB (10^6 bytes); VmHWM is read in MiB
  return [
    [
      `1. batched acks (1,000 IDs/request, 16 clients): item acks/s${on}`,
      fmt(f.itemAcksPerSecond),
      `BullMQ completes ${fmt(bull.completedPerSecond)} children/s`,
      `${fmt(ratio, 1)}× (target ≥ 50×)`,
    ],
    [
      '   same load, requests/s vs no-op ceiling',
      fmt(f.batchedRun.rps),
      `no-op: ${fmt(noopBatched.rps)} req/s`,
      `${fmt(f.batchedRun.rps / noopBatched.rps, 2)}×`,
    ],
    [
      `2. single-ID acks (64 clients): requests/s, median of ${SINGLE_ROUNDS} alternating rounds${on}`,
      fmt(single.rollcall.rps),
      `no-op: ${fmt(single.noop.rps)} req/s`,
      `${fmt(single.rollcall.rps / single.noop.rps, 2)}× (rounds: ${roundRatios}) (target ≥ 0.7×)`,
    ],
    ['   single-ID latency p50 / p99 (ms)', `${single.rollcall.p50} / ${single.rollcall.p99}`, `no-op: ${single.noop.p50} / ${single.noop.p99}`, ''],
    [
      '   same rounds, against the no-op served as rollcall serves its app (src/http/server.ts)',
      fmt(single.rollcall.rps),
      `no-op served alike: ${fmt(single.servedAlike.rps)} req/s, p50 / p99 ${single.servedAlike.p50} / ${single.servedAlike.p99} ms`,
      `${fmt(single.rollcall.rps / single.servedAlike.rps, 2)}× (rounds: ${f.rounds.map((r) => fmt(r.rollcall.rps / r.servedAlike.rps, 2)).join(', ')})`,
    ],
    ['   ack calls merged per transaction (whole run, mean)', fmt(f.mergeFactor, 1), '', ''],
    ...endToEndRows(f),
    [`5. add 10,000,000 items (median of 3)${on}`, `${fmt(f.addMs / 1000, 3)} s`, '', f.addMs < 1000 ? 'target < 1 s: met' : 'target < 1 s: MISSED'],
    [
      '   status of the 10M batch, one client, 5,000 reads after the ack loads (warm): p50 / p99',
      `${f.status.p50} / ${f.status.p99} ms`,
      `GET /healthz (no database): ${f.health.p50} / ${f.health.p99} ms`,
      f.status.p99 < 5 ? 'target p99 < 5 ms: met' : 'target p99 < 5 ms: MISSED',
    ],
    [
      '   the same, the first 5,000 reads after start (cold: V8 still compiling)',
      `${f.coldStatus.p50} / ${f.coldStatus.p99} ms`,
      `GET /healthz: ${f.coldHealth.p50} / ${f.coldHealth.p99} ms`,
      '',
    ],
    ['   status of the 10M batch, 16 clients: req/s, p99', `${fmt(f.statusLoaded.rps)} req/s, p99 ${f.statusLoaded.p99} ms`, '', ''],
    [`6. storage, 10M acked items: bitfield bits/item${on}`, fmt(f.payloadBits, 3), '', f.payloadBits <= 1.1 ? 'target ≤ 1.1: met' : 'target ≤ 1.1: MISSED'],
    [
      f.database === 'PostgreSQL'
        ? '   on disk (pg_total_relation_size after VACUUM, incl. row overhead) bits/item'
        : '   on disk (InnoDB pages incl. row overhead) bits/item',
      fmt(f.diskBits, 3),
      `${fmt(f.diskBytesForBatch / 2 ** 20, 2)} MiB for ${f.groupRows} group rows`,
      '',
    ],
    ['   compact acks of the 10M batch (10,000 items/request): items/s', fmt(10_000_000 / f.compact.seconds), '', ''],
    [`7. service RSS peak${on}`, `${fmt(rssMB, 1)} MB (${fmt(f.rssMiB, 1)} MiB)`, '', rssMB < 150 ? 'target < 150 MB: met' : 'target < 150 MB: MISSED'],
    [
      `8. callback claim: the dispatcher's read of 64 due events, 50,000 others waiting (median of 21)${on}`,
      `${fmt(f.claimReads.backoffMs, 1)} ms`,
      `those 50,000 due, of a tenant whose share is in use: ${fmt(f.claimReads.saturatedMs, 1)} ms`,
      '',
    ],
  ];
}

/** The BullMQ end-to-end rows (one per worker concurrency), where they were measured. */
function endToEndRows(f: Figures): Row[] {
  const e = f.endToEnd;
  if (!e) return [];
  const best: Row = [
    `   BullMQ end to end, each side at its fastest of those concurrencies, measured again (median of ${e.best.rounds.length} alternating rounds) — ${f.database}`,
    `${fmt(e.best.rollcallPerSecond)} (concurrency ${e.best.rollcallConcurrency})`,
    `plain BullMQ: ${fmt(e.best.plainPerSecond)} jobs/s (concurrency ${e.best.plainConcurrency})`,
    `${fmt(e.best.ratio, 2)}× (rounds: ${e.best.rounds.map((r) => fmt(r.rollcall / r.plain, 2)).join(', ')}; the choosing rounds' own medians: ${fmt(e.best.selected.ratio, 2)}×) (target ≥ 0.8×)`,
  ];
  const rows = e.byConcurrency.map((at): Row => [
    `4. BullMQ end to end, no-op jobs, concurrency ${at.concurrency} (both sides): jobs/s with rollcallProcessor (median of ${at.rounds.length} alternating rounds after a warm-up)${` — ${f.database}`}`,
    fmt(at.rollcallPerSecond),
    `plain BullMQ ${e.bullmqVersion}: ${fmt(at.plainPerSecond)} jobs/s`,
    `${fmt(at.ratio, 2)}× (rounds: ${at.rounds.map((r) => fmt(r.rollcall / r.plain, 2)).join(', ')}; ${fmt(at.ackCallsPerJob, 3)} ack calls per job, median call ${fmt(at.ackCallMedianMs, 1)} ms) (target ≥ 0.8×)`,
  ]);
  const cpu: Row[] = e.best.cpu
    ? [
        [
          `   the same rounds: CPU per job of the worker, Redis, the service and the database (all the rounds together) — ${f.database}`,
          '',
          '',
          describeCpu(e.best.cpu),
        ],
      ]
    : [];
  return [...rows, best, ...cpu, ...besideRows(e.beside), ...instantRows(e.instant)];
}

function besideRows(b: BullmqEndToEndResult['beside']): Row[] {
  if (!b) return [];
  const beside: Row = [
    `   plain BullMQ at concurrency ${b.concurrency} beside the service, which another process acks at the rollcall rounds' rate (${fmt(b.callsPerSecond)} calls/s of ${b.idsPerCall} IDs), median of ${b.rounds.length} alternating rounds`,
    fmt(b.besidePerSecond),
    `plain BullMQ alone: ${fmt(b.alonePerSecond)} jobs/s; with rollcallProcessor there: ${fmt(b.rollcallPerSecond)} jobs/s (${fmt(b.rollcallToBeside, 2)}× plain beside the service)`,
    `${fmt(b.ratio, 2)}× of alone (rounds: ${b.rounds.map((r) => fmt(r.beside / r.alone, 2)).join(', ')}): what sharing the machine with the service costs BullMQ itself`,
  ];
  return [beside];
}

function instantRows(i: BullmqEndToEndResult['instant']): Row[] {
  if (!i) return [];
  const instant: Row = [
    `   rollcallProcessor against an ack endpoint that answers at once and commits nothing (another process), each side at its fastest, measured again (median of ${i.best.rounds.length} alternating rounds): no commit to wait for, no service CPU`,
    `${fmt(i.best.rollcallPerSecond)} (concurrency ${i.best.rollcallConcurrency})`,
    `plain BullMQ: ${fmt(i.best.plainPerSecond)} jobs/s (concurrency ${i.best.plainConcurrency})`,
    `${fmt(i.best.ratio, 2)}× (rounds: ${i.best.rounds.map((r) => fmt(r.rollcall / r.plain, 2)).join(', ')}; by concurrency ${i.byConcurrency.map((at) => `${at.concurrency}: ${fmt(at.ratio, 2)}×, median call ${fmt(at.ackCallMedianMs, 1)} ms`).join('; ')})`,
  ];
  return [instant];
}

/** Which databases to measure: MariaDB always, PostgreSQL unless BENCH_PG=off. */
const DATABASES: BenchDatabase[] = process.env.BENCH_PG === 'off' ? [mariadb] : [mariadb, postgres];

async function main(): Promise<void> {
  console.log('building …');
  execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'ignore' });
  const noop = await startNoop();
  const servedAlike = await startNoop('rollcall');
  const figures: Figures[] = [];
  let noopBatched: LoadResult;
  try {
    const fake = '01234567-89ab-7def-8123-456789abcdef';
    noopBatched = check(
      await load({ url: `${noop.url}/v1/acks`, connections: 16, duration: SECONDS, body: () => idsBody(`${fake}:${fake}:`, 0, 1000) }),
      'noop batched',
    );
    for (const database of DATABASES) figures.push(await measureOn(database, noop, servedAlike));
  } finally {
    noop.stop();
    servedAlike.stop();
  }
  const bull = await runBullmq(BULLMQ_CHILDREN);
  const rows: Row[] = [
    ['3. BullMQ flow: children registered/s', '—', fmt(bull.registeredPerSecond), `${BULLMQ_CHILDREN.toLocaleString('en-US')} children, one flow`],
    ...figures.flatMap((f) => rowsOf(f, bull, noopBatched)),
  ];
  for (const row of rows) console.log(row.join(' | '));
  writeReport(rows, describeMachine(figures.map((f) => `${f.database} ${f.version}`).join(', ')));
}

function writeReport(rows: Array<[string, string, string, string]>, machine: string): void {
  const date = new Date().toISOString().slice(0, 10);
  const table = ['| measure | rollcall | peer / ceiling | ratio, target |', '|---|---|---|---|', ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n');
  const file = path.join(ROOT, 'docs/benchmarks.md');
  const previous = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
  const notes = previous.includes('<!-- notes -->') ? previous.slice(previous.indexOf('<!-- notes -->')) : '<!-- notes -->\n';
  fs.writeFileSync(
    file,
    `# Benchmarks\n\nWritten by \`npm run bench\` (bench/run.ts) on ${date}.\n\nMachine: ${machine}. BullMQ ${BULLMQ_VERSION}.\n` +
      `rollcall runs as one process (\`npm start\`'s command: \`node ${FROM_BUILD.join(' ')}\`) on MariaDB and on PostgreSQL (one after the other) with a durable commit (fsync) per transaction; ` +
      `the load generator (autocannon), the databases and Redis share the same two cores.\n\n${table}\n\n${notes}`,
  );
  console.log(`\n${table}\n\nwritten to docs/benchmarks.md`);
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
