import { spawn } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';

import { Processor, Queue, Worker } from 'bullmq';

import { HttpSend, httpSend, RollcallClient } from '../../src/client';
import { rollcallProcessor } from '../../src/integrations/bullmq';
import { openBatch } from '../../src/integrations/producer';
import { Accounted, cpuMeter, CpuUse, processesNamed } from './cpu';

const connection = { host: '127.0.0.1', port: 6379, maxRetriesPerRequest: null };
/**
 * Worker concurrencies measured, each the same for both sides. Plain BullMQ's no-op worker is bound
 * by its own CPU from about 25 slots up and, on some machines, loses ~20 % at 1,000 (more active jobs
 * to keep); a rollcall job holds its slot for one ack round trip, so its rate grows with the slots
 * until the CPU bounds it too. Hence also `best`: each side at the concurrency where it was fastest.
 * Where that is moved from run to run (plain BullMQ's at 100, 200, 300, 500 or 700 in round 2's
 * seventh session, rollcall's at 300, 500 or 700), so the grid has points between: with only 100, 300
 * and 1,000, a side whose best lay near 200, 500 or 700 was measured away from it. (Picked from the
 * same rounds, the old grid gave about the same ratios: docs/benchmarks.md.)
 */
const CONCURRENCIES = (process.env.BENCH_E2E_CONCURRENCY ?? '100,200,300,500,700,1000').split(',').map(Number);
/** Ack calls sent to the service before any round: a fresh process runs its code cold (see warmUp). */
const WARM_UP_ACK_CALLS = 4000;
const WARM_UP_IDS_PER_CALL = 50;
const WARM_UP_JOBS = 5000;
/** Rounds that measure each side again at its fastest concurrency (see confirmBest). */
const CONFIRM_ROUNDS = Number(process.env.BENCH_E2E_CONFIRM_ROUNDS ?? 10);
/** Rounds of plain BullMQ alone and beside the service under rollcall's ack load (see besideAckLoad). */
const BESIDE_ROUNDS = Number(process.env.BENCH_E2E_BESIDE_ROUNDS ?? 4);
/** Rounds per concurrency, and at each side's fastest, against the ack endpoint that commits nothing (see instantAcks). */
const INSTANT_ROUNDS = Number(process.env.BENCH_E2E_INSTANT_ROUNDS ?? 4);

export interface EndToEndAtConcurrency {
  concurrency: number;
  /** Jobs/s of a no-op worker, plain BullMQ: the median of the rounds. */
  plainPerSecond: number;
  /** Jobs/s of the same worker wrapped in rollcallProcessor, acking a sealed batch: the median of the rounds. */
  rollcallPerSecond: number;
  /** Median of the rounds' ratios (rollcall / plain). */
  ratio: number;
  rounds: Array<{ plain: number; rollcall: number }>;
  /** Ack calls rollcallProcessor sent in the timed rounds, per job. */
  ackCallsPerJob: number;
  /** Median time from sending an ack call to its answer: what a job waits for beyond BullMQ. */
  ackCallMedianMs: number;
}

/** What one side's rounds cost each process, over all its rounds together (see CpuAccount). */
export interface CpuPerJob {
  /** µs of CPU per job by process: the worker (this process), Redis, and those the caller named. */
  microsPerJob: Record<string, number>;
  /** CPU of all of them over the rounds' wall time: how many of the machine's cores they kept busy. */
  coresBusy: number;
  /** Jobs over the rounds' wall time: the side's jobs/s over all its rounds together. */
  perSecond: number;
}

/** Each side at its fastest concurrency, measured again (see confirmBest). */
export interface EndToEndBest {
  plainPerSecond: number;
  plainConcurrency: number;
  rollcallPerSecond: number;
  rollcallConcurrency: number;
  ratio: number;
  rounds: Array<{ plain: number; rollcall: number }>;
  /** The choice itself: each side's highest median, whose ratio is biased (see confirmBest). */
  selected: { plainPerSecond: number; rollcallPerSecond: number; ratio: number };
  /** CPU per job of each process in these rounds (with the service only; Linux's /proc). */
  cpu?: { plain: CpuPerJob; rollcall: CpuPerJob };
}

export interface BullmqEndToEndResult {
  jobs: number;
  bullmqVersion: string;
  /** Ack calls the service answered before the timed rounds, and untimed jobs each side ran first. */
  warmUp: { ackCalls: number; jobs: number };
  byConcurrency: EndToEndAtConcurrency[];
  /**
   * Each side at its fastest concurrency, measured again: CONFIRM_ROUNDS alternating rounds, plain
   * at its concurrency and rollcall at its own, after the rounds above chose them (the middle round
   * by ratio).
   */
  best: EndToEndBest;
  /**
   * The same comparison with rollcallProcessor acking at an endpoint that answers at once and
   * commits nothing (bench/lib/instantAcks.ts, another process): the worker does all of the
   * integration's work, while no ack waits for a commit and no service or database takes the
   * machine's cores — both at once, so it does not tell the two apart. Confirmed with
   * INSTANT_ROUNDS rounds (4), fewer than `best`'s: the noisier figure.
   */
  instant?: { byConcurrency: EndToEndAtConcurrency[]; best: EndToEndBest };
  /**
   * Plain BullMQ at its fastest concurrency, alone and beside the same service while another
   * process acks at the rate (calls/s, IDs per call) the rollcall rounds had there: what running the
   * service and its database on the worker's machine costs plain BullMQ, apart from the integration.
   */
  beside?: {
    concurrency: number;
    callsPerSecond: number;
    idsPerCall: number;
    alonePerSecond: number;
    besidePerSecond: number;
    /** beside / alone, the median of the rounds' ratios. */
    ratio: number;
    rounds: Array<{ alone: number; beside: number }>;
    /** The rollcall rounds' median at that concurrency, and its ratio to plain beside the load. */
    rollcallPerSecond: number;
    rollcallToBeside: number;
  };
}

/**
 * The measures beside the comparison itself. Neither depends on the service's store (the instant
 * endpoint commits nothing; the beside rounds are a property of the machine), so a run over several
 * stores takes them with one.
 */
export interface EndToEndExtras {
  instant: boolean;
  beside: boolean;
}

/** Each side's median rate at the concurrency where that median was highest. */
function fastestOfEach(byConcurrency: EndToEndAtConcurrency[]) {
  const side = (rate: (r: { plain: number; rollcall: number }) => number) =>
    byConcurrency
      .map((at) => ({ concurrency: at.concurrency, perSecond: medianOf(at.rounds.map(rate)) }))
      .reduce((a, b) => (b.perSecond > a.perSecond ? b : a));
  const plain = side((r) => r.plain);
  const rollcall = side((r) => r.rollcall);
  return {
    plainPerSecond: plain.perSecond,
    plainConcurrency: plain.concurrency,
    rollcallPerSecond: rollcall.perSecond,
    rollcallConcurrency: rollcall.concurrency,
    ratio: rollcall.perSecond / plain.perSecond,
  };
}

/** Where a timed round reports the CPU its processes used while its clock ran. */
interface CpuAccount {
  accounted: Accounted[];
  record(use: CpuUse): void;
}

/** Queues `jobs` jobs, then times one worker from start until the last completion. */
async function timeWorker(
  jobs: number,
  concurrency: number,
  enqueue: (queue: Queue) => Promise<void>,
  processor: Processor,
  cpu?: CpuAccount,
): Promise<number> {
  const queue = new Queue(`rollcall-bench-e2e-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`, { connection });
  try {
    await enqueue(queue);
    const meter = cpu && cpuMeter(cpu.accounted);
    let completed = 0;
    meter?.start();
    const started = process.hrtime.bigint();
    await new Promise<void>((resolve, reject) => {
      const worker = new Worker(queue.name, processor, { connection, concurrency });
      worker.on('failed', (_job, error) => reject(error));
      worker.on('completed', () => {
        if (++completed === jobs) void worker.close().then(resolve);
      });
    });
    const perSecond = jobs / (Number(process.hrtime.bigint() - started) / 1e9);
    if (meter) cpu.record(meter.stop());
    return perSecond;
  } finally {
    await queue.obliterate({ force: true });
    await queue.close();
  }
}

async function addJobs(queue: Queue, datas: Array<Record<string, unknown>>): Promise<void> {
  await queue.addBulk(datas.map((data) => ({ name: 'job', data, opts: { removeOnComplete: true } })));
}

/** The median; of an even count, the mean of the two middle values. */
function medianOf(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const half = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[half]! : (sorted[half - 1]! + sorted[half]!) / 2;
}

/**
 * Each process's CPU per job (µs) and the cores all of them kept busy, over the rounds together
 * (sums, not medians, so that jobs/s = cores busy / CPU per job holds exactly; see describeCpu).
 */
function cpuPerJob(uses: CpuUse[], jobs: number): CpuPerJob {
  const names = [...new Set(uses.flatMap((use) => Object.keys(use.seconds)))];
  const sum = (of: (use: CpuUse) => number) => uses.reduce((total, use) => total + of(use), 0);
  const allJobs = jobs * uses.length;
  const wallSeconds = sum((use) => use.wallSeconds);
  const cpuSeconds = sum((use) => Object.values(use.seconds).reduce((a, b) => a + b, 0));
  return {
    microsPerJob: Object.fromEntries(names.map((name) => [name, (sum((use) => use.seconds[name] ?? 0) * 1e6) / allJobs])),
    coresBusy: cpuSeconds / wallSeconds,
    perSecond: allJobs / wallSeconds,
  };
}

/**
 * One line on what each side's rounds at its fastest cost the accounted processes, per job. Jobs/s
 * is the cores they kept busy over their CPU per job, so the ratio of the two sides' jobs/s (over
 * all their rounds together) is the ratio of their CPU per job (plain's / rollcall's: what the
 * integration, the service and its database add to these processes) times that of their busy cores
 * (rollcall's / plain's: below 1 where less of the machine is kept busy — by jobs waiting for their
 * acks, or by work outside these processes, such as the kernel's for the commits' fsync).
 */
export function describeCpu(cpu: NonNullable<EndToEndBest['cpu']>): string {
  const total = (side: CpuPerJob) => Object.values(side.microsPerJob).reduce((a, b) => a + b, 0);
  const side = (figures: CpuPerJob) =>
    `${Object.entries(figures.microsPerJob)
      .map(([name, micros]) => `${name} ${micros.toFixed(1)}`)
      .join(', ')} (${total(figures).toFixed(1)} in all; ${figures.coresBusy.toFixed(2)} cores busy)`;
  const perJob = total(cpu.plain) / total(cpu.rollcall);
  const busy = cpu.rollcall.coresBusy / cpu.plain.coresBusy;
  return `CPU µs per job: plain ${side(cpu.plain)}; with rollcallProcessor ${side(cpu.rollcall)}; the rounds together, jobs/s ${(cpu.rollcall.perSecond / cpu.plain.perSecond).toFixed(2)}× = CPU per job, plain's / rollcall's, ${perJob.toFixed(2)} × cores busy, rollcall's / plain's, ${busy.toFixed(2)}`;
}

/** Each side's median rate, and the median of the rounds' ratios (rollcall / plain). */
function mediansOf(rounds: Array<{ plain: number; rollcall: number }>) {
  return {
    plainPerSecond: medianOf(rounds.map((r) => r.plain)),
    rollcallPerSecond: medianOf(rounds.map((r) => r.rollcall)),
    ratio: medianOf(rounds.map((r) => r.rollcall / r.plain)),
  };
}

/**
 * A fresh rollcall process runs its ack path unoptimised for its first few thousand calls (CPU per
 * 50-ID call fell from ~1.9 ms to ~0.7 ms over 4,000 calls, and the call's median from 3.6 ms to
 * 1.9 ms), while a deployed service has long been warm; one timed round makes only ~400 calls. So
 * the service answers WARM_UP_ACK_CALLS calls of its own batch first, four at a time.
 */
async function warmUpService(client: RollcallClient): Promise<void> {
  const ids: string[] = [];
  await openBatch(client, {
    count: WARM_UP_ACK_CALLS * WARM_UP_IDS_PER_CALL,
    enqueue: async (chunk) => {
      ids.push(...chunk);
    },
  });
  let next = 0;
  const caller = async (): Promise<void> => {
    while (next < ids.length) {
      const from = next;
      next += WARM_UP_IDS_PER_CALL;
      await client.ack(ids.slice(from, from + WARM_UP_IDS_PER_CALL), { outcome: 'succeeded' });
    }
  };
  await Promise.all([caller(), caller(), caller(), caller()]);
}

/**
 * BullMQ end to end on Redis at 127.0.0.1:6379, in this process: jobs/s of a no-op worker, plain
 * and wrapped in rollcallProcessor (which acks every job's item at the rollcall service at `url`
 * before the job completes), at each of CONCURRENCIES. Both sides first run untimed (as does the
 * service's ack path, warmUpService); then rounds alternate, and so does which side goes first in
 * a round, as the machine's speed drifts. The rounds at each side's fastest also account for the
 * CPU of this process, Redis and `accounted` (the service and its database, where they run here).
 */
export async function runBullmqEndToEnd(
  url: string,
  jobs = 20_000,
  roundCount = 4,
  extras: EndToEndExtras = { instant: true, beside: true },
  accounted: Accounted[] = [],
): Promise<BullmqEndToEndResult> {
  let counting = false;
  let ackCalls = 0;
  let callMs: number[] = [];
  const send = httpSend(); // the client's default, timed
  const countingSend: HttpSend = async (url, request) => {
    if (!counting || !url.endsWith('/v1/acks')) return send(url, request);
    ackCalls++;
    const started = performance.now();
    const response = await send(url, request);
    callMs.push(performance.now() - started);
    return response;
  };
  const clientOf = (baseUrl: string) => new RollcallClient({ baseUrl, fetch: countingSend });
  const client = clientOf(url);
  const plain = (count: number, concurrency: number, cpu?: CpuAccount) =>
    timeWorker(
      count,
      concurrency,
      async (queue) => {
        for (let from = 0; from < count; from += 1000)
          await addJobs(
            queue,
            Array.from({ length: Math.min(1000, count - from) }, (_, i) => ({ n: from + i })),
          );
      },
      async () => undefined,
      cpu,
    );
  const withRollcall = (acking: RollcallClient) => (count: number, concurrency: number, cpu?: CpuAccount) =>
    timeWorker(
      count,
      concurrency,
      async (queue) => {
        await openBatch(acking, {
          count,
          enqueue: (ids) =>
            addJobs(
              queue,
              ids.map((rollcallItemId) => ({ rollcallItemId })),
            ),
        });
      },
      rollcallProcessor(acking, async () => undefined),
      cpu,
    );
  const timed = (rollcall: (count: number, concurrency: number, cpu?: CpuAccount) => Promise<number>) => async (concurrency: number, cpu?: CpuAccount) => {
    counting = true;
    try {
      return await rollcall(jobs, concurrency, cpu);
    } finally {
      counting = false;
    }
  };

  /** Alternating rounds of plain BullMQ and `rollcall` at each concurrency. */
  const atEachConcurrency = async (rollcall: (concurrency: number) => Promise<number>, rounds: number): Promise<EndToEndAtConcurrency[]> => {
    const byConcurrency: EndToEndAtConcurrency[] = [];
    for (const concurrency of CONCURRENCIES) {
      ackCalls = 0;
      callMs = [];
      const measured = await alternating(
        rounds,
        () => plain(jobs, concurrency),
        () => rollcall(concurrency),
      );
      byConcurrency.push({
        concurrency,
        ...mediansOf(measured),
        rounds: measured,
        ackCallsPerJob: ackCalls / (jobs * rounds),
        ackCallMedianMs: medianOf(callMs),
      });
    }
    return byConcurrency;
  };

  await warmUpService(client);
  await plain(WARM_UP_JOBS, CONCURRENCIES[0]!);
  await withRollcall(client)(WARM_UP_JOBS, CONCURRENCIES[0]!);

  const timeRollcall = timed(withRollcall(client));
  const byConcurrency = await atEachConcurrency(timeRollcall, roundCount);
  const cpuUses = { plain: [] as CpuUse[], rollcall: [] as CpuUse[] };
  const account = (side: keyof typeof cpuUses): CpuAccount => ({
    accounted: [processesNamed('Redis', 'redis-server'), ...accounted],
    record: (use) => cpuUses[side].push(use),
  });
  const best = await confirmBest(
    fastestOfEach(byConcurrency),
    (concurrency) => plain(jobs, concurrency, account('plain')),
    (concurrency) => timeRollcall(concurrency, account('rollcall')),
  );
  best.cpu = { plain: cpuPerJob(cpuUses.plain, jobs), rollcall: cpuPerJob(cpuUses.rollcall, jobs) };
  const atPlainBest = byConcurrency.find((at) => at.concurrency === best.plainConcurrency)!;
  // Rounds set to 0 turn a side measurement off (no result, rather than NaN figures).
  const beside = extras.beside && BESIDE_ROUNDS > 0 ? await besideAckLoad(url, atPlainBest, () => plain(jobs, atPlainBest.concurrency)) : undefined;
  const instant =
    !extras.instant || INSTANT_ROUNDS <= 0
      ? undefined
      : await withInstantAcks(url, async (instantUrl) => {
          const instantClient = clientOf(instantUrl);
          await withRollcall(instantClient)(WARM_UP_JOBS, CONCURRENCIES[0]!); // untimed, as for the service above
          const timeInstant = timed(withRollcall(instantClient));
          const instantByConcurrency = await atEachConcurrency(timeInstant, INSTANT_ROUNDS);
          const instantBest = await confirmBest(fastestOfEach(instantByConcurrency), (concurrency) => plain(jobs, concurrency), timeInstant, INSTANT_ROUNDS);
          return { byConcurrency: instantByConcurrency, best: instantBest };
        });
  return {
    jobs,
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a package's own version, read once
    bullmqVersion: (require('bullmq/package.json') as { version: string }).version,
    warmUp: { ackCalls: WARM_UP_ACK_CALLS, jobs: WARM_UP_JOBS },
    byConcurrency,
    best,
    beside,
    instant,
  };
}

/** Runs `plain` with, beside it, an ack load on the service as the rollcall rounds at `at` made it. */
async function besideAckLoad(url: string, at: EndToEndAtConcurrency, plain: () => Promise<number>): Promise<NonNullable<BullmqEndToEndResult['beside']>> {
  const callsPerSecond = at.rollcallPerSecond * at.ackCallsPerJob;
  const idsPerCall = Math.max(1, Math.round(1 / at.ackCallsPerJob));
  const pairs = await alternating(BESIDE_ROUNDS, plain, () => withAckLoad(url, idsPerCall, callsPerSecond, plain));
  const rounds = pairs.map((r) => ({ alone: r.plain, beside: r.rollcall }));
  const medians = mediansOf(pairs);
  return {
    concurrency: at.concurrency,
    callsPerSecond,
    idsPerCall,
    alonePerSecond: medians.plainPerSecond,
    besidePerSecond: medians.rollcallPerSecond,
    ratio: medians.ratio,
    rounds,
    rollcallPerSecond: at.rollcallPerSecond,
    rollcallToBeside: at.rollcallPerSecond / medians.rollcallPerSecond,
  };
}

/** Runs `work` while bench/lib/ackLoad.ts, in a process of its own, acks on the service at `url`. */
function withAckLoad<T>(url: string, idsPerCall: number, callsPerSecond: number, work: () => Promise<T>): Promise<T> {
  const env = { ACK_LOAD_URL: url, ACK_LOAD_IDS: String(idsPerCall), ACK_LOAD_PER_SECOND: String(callsPerSecond) };
  return withBenchProcess('bench/lib/ackLoad.ts', env, (line) => (line === 'ACK_LOAD_READY' ? line : undefined), work);
}

/** Runs `work` with the URL of bench/lib/instantAcks.ts, in a process of its own, in front of the service at `url`. */
function withInstantAcks<T>(url: string, work: (instantUrl: string) => Promise<T>): Promise<T> {
  const ready = (line: string) => {
    const port = /^ROLLCALL_PORT=(\d+)$/.exec(line)?.[1];
    return port === undefined ? undefined : `http://127.0.0.1:${port}`;
  };
  return withBenchProcess('bench/lib/instantAcks.ts', { INSTANT_ACKS_TARGET: url }, ready, work);
}

/**
 * Runs `script` (node --import tsx) in a process of its own and `work` once a line of its output
 * makes `ready` return a value, which `work` gets; the process must still run when `work` ends.
 */
async function withBenchProcess<T>(
  script: string,
  env: Record<string, string>,
  ready: (line: string) => string | undefined,
  work: (readyValue: string) => Promise<T>,
): Promise<T> {
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    cwd: path.resolve(__dirname, '../..'),
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  try {
    const readyValue = await new Promise<string>((resolve, reject) => {
      readline.createInterface({ input: child.stdout! }).on('line', (line) => {
        const value = ready(line);
        if (value !== undefined) resolve(value);
      });
      void exited.then((code) => reject(new Error(`${script} exited with ${code} before it was ready`)));
    });
    const result = await work(readyValue);
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${script} stopped during the rounds (${child.exitCode ?? child.signalCode})`);
    return result;
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

/**
 * `count` rounds of both sides; which side goes first alternates, as the machine's speed drifts.
 * The count must be even, so each side goes first equally often: with an odd count the side that
 * goes first in the first round goes first once more, and the order may matter (in round 2's seventh
 * session, rounds in which plain BullMQ went first gave a ratio 1.6 % higher on average, in 31 of 56
 * sets of rounds: within the noise, but not for an odd count to decide).
 */
async function alternating(count: number, plain: () => Promise<number>, rollcall: () => Promise<number>): Promise<Array<{ plain: number; rollcall: number }>> {
  if (count % 2 !== 0) throw new Error(`an even number of alternating rounds, so each side goes first as often (got ${count})`);
  const rounds: Array<{ plain: number; rollcall: number }> = [];
  for (let round = 0; round < count; round++) {
    if (round % 2 === 0) {
      const p = await plain();
      rounds.push({ plain: p, rollcall: await rollcall() });
    } else {
      const r = await rollcall();
      rounds.push({ plain: await plain(), rollcall: r });
    }
  }
  return rounds;
}

/**
 * Measures each side again at the concurrency the rounds above found fastest for it. The highest of
 * several noisy medians overstates its side (the winner's curse), the more so the more
 * concurrencies come near it, and plain BullMQ's often do (about as fast at 100, 300 and 1,000 on
 * some runs). Rounds that took no part in the choice carry no such bias; they moved the ratio
 * either way in our runs (docs/benchmarks.md), and their spread shows the machine's noise.
 */
async function confirmBest(
  selected: ReturnType<typeof fastestOfEach>,
  plain: (concurrency: number) => Promise<number>,
  rollcall: (concurrency: number) => Promise<number>,
  roundCount = CONFIRM_ROUNDS,
): Promise<EndToEndBest> {
  const rounds = await alternating(
    roundCount,
    () => plain(selected.plainConcurrency),
    () => rollcall(selected.rollcallConcurrency),
  );
  const medians = mediansOf(rounds);
  return {
    plainPerSecond: medians.plainPerSecond,
    plainConcurrency: selected.plainConcurrency,
    rollcallPerSecond: medians.rollcallPerSecond,
    rollcallConcurrency: selected.rollcallConcurrency,
    ratio: medians.ratio,
    rounds,
    selected: { plainPerSecond: selected.plainPerSecond, rollcallPerSecond: selected.rollcallPerSecond, ratio: selected.ratio },
  };
}
