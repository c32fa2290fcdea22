/**
 * `npm run bench:bullmq`: only the BullMQ end-to-end comparison of `npm run bench` — jobs/s of plain
 * BullMQ vs BullMQ with rollcallProcessor, against one rollcall process (the build) on MariaDB, then
 * on PostgreSQL (BENCH_PG=off: MariaDB alone), with what each side's rounds at its fastest cost the
 * worker, Redis, the service and the database in CPU per job; the instant-endpoint and beside rounds
 * with MariaDB's.
 * Environment: BENCH_MYSQL_URL, BENCH_E2E_JOBS (default 20,000), BENCH_E2E_ROUNDS (default 4),
 * BENCH_E2E_CONCURRENCY (worker concurrencies, the same for both sides; default 100,200,300,500,700,1000),
 * BENCH_E2E_CONFIRM_ROUNDS (rounds at each side's fastest concurrency, measured again; default 10: single rounds moved by a third either way on this machine),
 * BENCH_E2E_BESIDE_ROUNDS (rounds of plain BullMQ alone and beside the service under rollcall's ack load; default 4; 0: none),
 * BENCH_E2E_INSTANT_ROUNDS (rounds per concurrency, and at each side's fastest, with an ack endpoint that commits nothing; default 4; 0: none),
 * BENCH_E2E_INSTANT_DELAY_MS (how long that endpoint holds each answer, spending no CPU; default 0).
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';

import { Knex } from 'knex';

import { FROM_BUILD, spawnService } from '../test/helpers/processes';
import { BullmqEndToEndResult, describeCpu, EndToEndExtras, runBullmqEndToEnd } from './lib/bullmqEndToEnd';
import { Accounted } from './lib/cpu';
import { MARIADB_SERVER, POSTGRES_SERVER, withMariadbDatabase, withPostgresDatabase } from './lib/database';

interface Store {
  name: string;
  withDatabase: (work: (url: string, db: Knex) => Promise<void>) => Promise<void>;
  extras: EndToEndExtras;
  /** The database server's processes, whose CPU the rounds at each side's fastest account for. */
  server: Accounted;
}

const STORES: Store[] = [
  { name: 'MariaDB', withDatabase: withMariadbDatabase, extras: { instant: true, beside: true }, server: MARIADB_SERVER },
  ...(process.env.BENCH_PG === 'off'
    ? []
    : [{ name: 'PostgreSQL', withDatabase: withPostgresDatabase, extras: { instant: false, beside: false }, server: POSTGRES_SERVER }]),
];

function report(store: string, result: BullmqEndToEndResult): void {
  for (const at of result.byConcurrency)
    console.log(
      `BullMQ end to end (${store}), concurrency ${at.concurrency}: plain ${at.plainPerSecond.toFixed(0)} jobs/s, with rollcallProcessor ${at.rollcallPerSecond.toFixed(0)} jobs/s: ${at.ratio.toFixed(2)}× (target ≥ 0.8×)`,
    );
  const best = result.best;
  console.log(
    `BullMQ end to end (${store}), each side at its fastest concurrency, measured again: plain ${best.plainPerSecond.toFixed(0)} jobs/s (${best.plainConcurrency}), with rollcallProcessor ${best.rollcallPerSecond.toFixed(0)} jobs/s (${best.rollcallConcurrency}): ${best.ratio.toFixed(2)}× (rounds: ${best.rounds.map((r) => (r.rollcall / r.plain).toFixed(2)).join(', ')}; the choosing rounds' own medians: ${best.selected.ratio.toFixed(2)}×) (target ≥ 0.8×)`,
  );
  if (best.cpu) console.log(`BullMQ end to end (${store}), each side at its fastest: ${describeCpu(best.cpu)}`);
  const instant = result.instant;
  if (instant) {
    for (const at of instant.byConcurrency)
      console.log(
        `BullMQ end to end against an ack endpoint that commits nothing (no commit wait, no service CPU), concurrency ${at.concurrency}: plain ${at.plainPerSecond.toFixed(0)} jobs/s, with rollcallProcessor ${at.rollcallPerSecond.toFixed(0)} jobs/s: ${at.ratio.toFixed(2)}× (${at.ackCallsPerJob.toFixed(3)} ack calls per job, median call ${at.ackCallMedianMs.toFixed(1)} ms)`,
      );
    console.log(
      `BullMQ end to end against an ack endpoint that commits nothing, each side at its fastest, measured again: plain ${instant.best.plainPerSecond.toFixed(0)} jobs/s (${instant.best.plainConcurrency}), with rollcallProcessor ${instant.best.rollcallPerSecond.toFixed(0)} jobs/s (${instant.best.rollcallConcurrency}): ${instant.best.ratio.toFixed(2)}× (rounds: ${instant.best.rounds.map((r) => (r.rollcall / r.plain).toFixed(2)).join(', ')}; the choosing rounds' own medians: ${instant.best.selected.ratio.toFixed(2)}×)`,
    );
  }
  const beside = result.beside;
  if (beside)
    console.log(
      `BullMQ end to end (${store}), plain at concurrency ${beside.concurrency} beside the service acked at the rollcall rounds' rate by another process (${beside.callsPerSecond.toFixed(0)} calls/s of ${beside.idsPerCall} IDs): ${beside.besidePerSecond.toFixed(0)} jobs/s, alone ${beside.alonePerSecond.toFixed(0)}: ${beside.ratio.toFixed(2)}× (rounds: ${beside.rounds.map((r) => (r.beside / r.alone).toFixed(2)).join(', ')}); with rollcallProcessor there ${beside.rollcallPerSecond.toFixed(0)} jobs/s: ${beside.rollcallToBeside.toFixed(2)}× plain beside the service`,
    );
}

async function main(): Promise<void> {
  execFileSync('npm', ['run', 'build'], { cwd: path.resolve(__dirname, '..'), stdio: 'ignore' });
  for (const store of STORES)
    await store.withDatabase(async (databaseUrl) => {
      const service = await spawnService({ DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' }, FROM_BUILD);
      try {
        const result = await runBullmqEndToEnd(
          service.url,
          Number(process.env.BENCH_E2E_JOBS ?? 20_000),
          Number(process.env.BENCH_E2E_ROUNDS ?? 4),
          store.extras,
          [{ name: 'service', pids: () => [service.child.pid!] }, store.server],
        );
        console.log(JSON.stringify({ store: store.name, ...result }, null, 2));
        report(store.name, result); // now, so a later store that fails takes nothing of it away
      } finally {
        await service.stop();
      }
    });
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
