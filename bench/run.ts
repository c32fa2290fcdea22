/**
 * `npm run bench`: rollcall on MariaDB driven over HTTP, next to its peers on the same machine
 * (an express no-op endpoint = the HTTP ceiling, BullMQ flows on Redis). Prints a table and writes
 * docs/benchmarks.md. Environment: BENCH_MYSQL_URL (default mysql://root@127.0.0.1:3306/test).
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

import knex, { Knex } from 'knex';

import { call, FROM_BUILD, ServiceProcess, spawnService } from '../test/helpers/processes';
import { BULLMQ_VERSION, runBullmq } from './lib/bullmqPeer';
import { sequentialLatency } from './lib/latency';
import { load, LoadResult } from './lib/load';
import { describeMachine, peakRssMiB } from './lib/machine';

const ROOT = path.resolve(__dirname, '..');
const MYSQL_URL = process.env.BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const BATCHED_ITEMS = Number(process.env.BENCH_BATCHED_ITEMS ?? 2_000_000);
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

async function withDatabase<T>(work: (url: string, db: Knex) => Promise<T>): Promise<T> {
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

async function main(): Promise<void> {
  console.log('building …');
  execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'ignore' });
  const rows: Array<[string, string, string, string]> = [];
  const add = (what: string, rollcall: string, peer: string, verdict: string) => {
    rows.push([what, rollcall, peer, verdict]);
    console.log(`${what}: ${rollcall} | ${peer} | ${verdict}`);
  };
  const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

  await withDatabase(async (databaseUrl, db) => {
    const mysqlVersion = String(((await db.raw('SELECT VERSION() v')) as Array<Array<{ v: string }>>)[0]![0]!.v);
    const service: ServiceProcess = await spawnService({ DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' }, FROM_BUILD);
    const pid = service.child.pid!;
    const phase = (name: string) => console.log(`  after ${name}: service RSS peak so far ${peakRssMiB(pid).toFixed(1)} MiB`);
    phase('start');
    const url = service.url;
    try {
      // 5. Add 10M items (three times), status of that batch.
      const adds = [];
      for (let i = 0; i < 3; i++) adds.push(await openBatch(url, 10_000_000));
      const addMs = adds.map((a) => a.addMs).sort((a, b) => a - b)[1]!;
      const big = adds[0]!;
      // Read right after start, this measures V8 still compiling the read path; it is read again, warm, after the ack loads.
      const coldStatus = await sequentialLatency(`${url}/v1/batches/${big.id}`, 5000);
      const coldHealth = await sequentialLatency(`${url}/healthz`, 5000);
      const statusLoaded = check(await load({ url: `${url}/v1/batches/${big.id}`, method: 'GET', connections: 16, duration: 5 }), 'status, 16 clients');
      phase('adds and status');

      // 6. Storage: ack every item of the 10M batch (compact form, 10,000 items a call), then measure.
      await call(`${url}/v1/batches/${big.id}/seal`, 'POST', {});
      const compactBodies: string[] = [];
      let entries: string[] = [];
      let inCall = 0;
      for (const g of big.groups) {
        for (let from = 0; from < g.size;) {
          const take = Math.min(g.size - from, 10_000 - inCall);
          entries.push(`{"batchId":"${big.id}","groupId":"${g.id}","indexes":[[${from},${from + take - 1}]]}`);
          from += take;
          inCall += take;
          if (inCall === 10_000) {
            compactBodies.push(`{"groups":[${entries.join(',')}]}`);
            entries = [];
            inCall = 0;
          }
        }
      }
      if (entries.length) compactBodies.push(`{"groups":[${entries.join(',')}]}`);
      const compact = check(
        await load({ url: `${url}/v1/acks`, connections: 16, amount: compactBodies.length, body: () => compactBodies.pop()! }),
        'compact acks',
      );
      const done = (await call(`${url}/v1/batches/${big.id}`, 'GET')).body;
      if (done.state !== 'complete' || done.succeeded !== 10_000_000) throw new Error(`10M batch not complete: ${JSON.stringify(done)}`);
      await db.raw('ANALYZE TABLE item_groups');
      const [[sizes]] = (await db.raw(
        `SELECT data_length d, index_length i, table_rows r FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'item_groups'`,
      )) as [[{ d: number; i: number; r: number }]];
      const [[payload]] = (await db.raw(
        `SELECT COUNT(*) n, SUM(LENGTH(succeeded_bits)) s, SUM(COALESCE(LENGTH(failed_bits), 0)) f FROM item_groups WHERE batch_id = ?`,
        [big.id],
      )) as [[{ n: number; s: number; f: number }]];
      const [[all]] = (await db.raw(`SELECT COUNT(*) n FROM item_groups`)) as [[{ n: number }]];
      // The table also holds the two unacked 10M batches' groups (no bitfields yet): count this batch's share of rows.
      const diskBytesForBatch = ((Number(sizes.d) + Number(sizes.i)) * Number(payload.n)) / Number(all.n);
      const payloadBits = ((Number(payload.s) + Number(payload.f)) * 8) / 10_000_000;
      const diskBits = (diskBytesForBatch * 8) / 10_000_000;
      phase('compact acks of 10M');

      // 1. Batched acks: 1,000 IDs a request, 16 clients.
      const batched = await openBatch(url, BATCHED_ITEMS);
      await call(`${url}/v1/batches/${batched.id}/seal`, 'POST', {});
      const bodies = sliceChunks(batched.id, batched.groups, 1000);
      const batchedRun = check(await load({ url: `${url}/v1/acks`, connections: 16, amount: bodies.length, body: () => bodies.pop()! }), 'batched acks');
      const batchedState = (await call(`${url}/v1/batches/${batched.id}`, 'GET')).body;
      if (batchedState.state !== 'complete' || batchedState.succeeded !== BATCHED_ITEMS) throw new Error('batched run lost acks');
      const itemAcksPerSecond = BATCHED_ITEMS / batchedRun.seconds;
      phase('batched acks');

      // 2 and 3. Single-ID ack requests, 64 clients, against the HTTP ceiling with the same loads. The
      // machine's speed drifts from minute to minute, so the two alternate in rounds and the ratio is
      // the median of the rounds' ratios.
      const single = await openBatch(url, 3_000_000);
      const singlePrefixes = single.groups.map((g) => `${single.id}:${g.id}:`);
      let next = 0;
      const noop = await startNoop();
      const servedAlike = await startNoop('rollcall');
      const fake = '01234567-89ab-7def-8123-456789abcdef';
      const rounds: Array<{ rollcall: LoadResult; noop: LoadResult; servedAlike: LoadResult }> = [];
      let noopBatched: LoadResult;
      try {
        noopBatched = check(
          await load({ url: `${noop.url}/v1/acks`, connections: 16, duration: SECONDS, body: () => idsBody(`${fake}:${fake}:`, 0, 1000) }),
          'noop batched',
        );
        let n = 0;
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
      } finally {
        noop.stop();
        servedAlike.stop();
      }
      const answered = rounds.reduce((sum, r) => sum + r.rollcall.requests, 0);
      const singleState = (await call(`${url}/v1/batches/${single.id}`, 'GET')).body;
      // autocannon stops at each deadline without counting the requests still in flight (one per connection).
      const unanswered = singleState.succeeded - answered;
      if (unanswered < 0 || unanswered > 64 * SINGLE_ROUNDS) throw new Error(`single run: ${answered} answered, ${singleState.succeeded} recorded`);
      const byRatio = [...rounds].sort((a, b) => a.rollcall.rps / a.noop.rps - b.rollcall.rps / b.noop.rps);
      const medianRound = byRatio[Math.floor(byRatio.length / 2)]!;
      const singleRun = medianRound.rollcall;
      const noopSingle = medianRound.noop;

      phase('single-ID acks');
      const status = await sequentialLatency(`${url}/v1/batches/${big.id}`, 5000);
      const health = await sequentialLatency(`${url}/healthz`, 5000);
      const metricsText = (await (await fetch(`${url}/metrics`)).text()).split('\n');
      const metric = (name: string) => Number(metricsText.find((l) => l.startsWith(`${name} `))?.split(' ')[1] ?? NaN);
      const mergeFactor = metric('rollcall_group_commit_calls_sum') / metric('rollcall_group_commit_calls_count');
      const rss = peakRssMiB(pid);

      // 4. BullMQ flows.
      const bull = await runBullmq(BULLMQ_CHILDREN);

      const ratio = itemAcksPerSecond / bull.completedPerSecond;
      add(
        '1. batched acks (1,000 IDs/request, 16 clients): item acks/s',
        fmt(itemAcksPerSecond),
        `BullMQ completes ${fmt(bull.completedPerSecond)} children/s`,
        `${fmt(ratio, 1)}× (target ≥ 50×)`,
      );
      add(
        '   same load, requests/s vs no-op ceiling',
        fmt(batchedRun.rps),
        `no-op: ${fmt(noopBatched.rps)} req/s`,
        `${fmt(batchedRun.rps / noopBatched.rps, 2)}×`,
      );
      const roundRatios = rounds.map((r) => fmt(r.rollcall.rps / r.noop.rps, 2)).join(', ');
      add(
        `2. single-ID acks (64 clients): requests/s, median of ${SINGLE_ROUNDS} alternating rounds`,
        fmt(singleRun.rps),
        `no-op: ${fmt(noopSingle.rps)} req/s`,
        `${fmt(singleRun.rps / noopSingle.rps, 2)}× (rounds: ${roundRatios}) (target ≥ 0.7×)`,
      );
      add('   single-ID latency p50 / p99 (ms)', `${singleRun.p50} / ${singleRun.p99}`, `no-op: ${noopSingle.p50} / ${noopSingle.p99}`, '');
      const alike = medianRound.servedAlike;
      add(
        '   same rounds, against the no-op served as rollcall serves its app (src/http/server.ts)',
        fmt(singleRun.rps),
        `no-op served alike: ${fmt(alike.rps)} req/s, p50 / p99 ${alike.p50} / ${alike.p99} ms`,
        `${fmt(singleRun.rps / alike.rps, 2)}× (rounds: ${rounds.map((r) => fmt(r.rollcall.rps / r.servedAlike.rps, 2)).join(', ')})`,
      );
      add('   ack calls merged per transaction (whole run, mean)', fmt(mergeFactor, 1), '', '');
      add('3. BullMQ flow: children registered/s', '—', fmt(bull.registeredPerSecond), `${BULLMQ_CHILDREN.toLocaleString('en-US')} children, one flow`);
      add('5. add 10,000,000 items (median of 3)', `${fmt(addMs / 1000, 3)} s`, '', addMs < 1000 ? 'target < 1 s: met' : 'target < 1 s: MISSED');
      add(
        '   status of the 10M batch, one client, 5,000 reads after the ack loads (warm): p50 / p99',
        `${status.p50} / ${status.p99} ms`,
        `GET /healthz (no database): ${health.p50} / ${health.p99} ms`,
        status.p99 < 5 ? 'target p99 < 5 ms: met' : 'target p99 < 5 ms: MISSED',
      );
      add(
        '   the same, the first 5,000 reads after start (cold: V8 still compiling)',
        `${coldStatus.p50} / ${coldStatus.p99} ms`,
        `GET /healthz: ${coldHealth.p50} / ${coldHealth.p99} ms`,
        '',
      );
      add('   status of the 10M batch, 16 clients: req/s, p99', `${fmt(statusLoaded.rps)} req/s, p99 ${statusLoaded.p99} ms`, '', '');
      add('6. storage, 10M acked items: bitfield bits/item', fmt(payloadBits, 3), '', payloadBits <= 1.1 ? 'target ≤ 1.1: met' : 'target ≤ 1.1: MISSED');
      add(
        '   on disk (InnoDB pages incl. row overhead) bits/item',
        fmt(diskBits, 3),
        `${fmt(diskBytesForBatch / 2 ** 20, 2)} MiB for ${payload.n} group rows`,
        '',
      );
      add('   compact acks of the 10M batch (10,000 items/request): items/s', fmt(10_000_000 / compact.seconds), '', '');
      // The target is in MB (10^6 bytes); VmHWM is read in MiB.
      const rssMB = (rss * 2 ** 20) / 1e6;
      add('7. service RSS peak', `${fmt(rssMB, 1)} MB (${fmt(rss, 1)} MiB)`, '', rssMB < 150 ? 'target < 150 MB: met' : 'target < 150 MB: MISSED');

      writeReport(rows, describeMachine(mysqlVersion));
    } finally {
      await service.stop();
    }
  });
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
      `rollcall runs as one process (\`npm start\`'s command: \`node ${FROM_BUILD.join(' ')}\`) on MariaDB with a durable commit (fsync) per transaction; ` +
      `the load generator (autocannon), MariaDB and Redis share the same two cores.\n\n${table}\n\n${notes}`,
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
