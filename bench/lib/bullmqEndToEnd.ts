import { Processor, Queue, Worker } from 'bullmq';

import { RollcallClient } from '../../src/client';
import { rollcallProcessor } from '../../src/integrations/bullmq';
import { openBatch } from '../../src/integrations/producer';

const connection = { host: '127.0.0.1', port: 6379, maxRetriesPerRequest: null };
/** Worker concurrency, the same for both; a job waiting for its ack holds its slot, so slots hide the round trip. */
const CONCURRENCY = Number(process.env.BENCH_E2E_CONCURRENCY ?? 100);

export interface BullmqEndToEndResult {
  jobs: number;
  concurrency: number;
  bullmqVersion: string;
  /** Jobs/s of a no-op worker, plain BullMQ: the median round. */
  plainPerSecond: number;
  /** Jobs/s of the same worker wrapped in rollcallProcessor, acking a sealed batch: the median round. */
  rollcallPerSecond: number;
  /** Median of the rounds' ratios (rollcall / plain). */
  ratio: number;
  rounds: Array<{ plain: number; rollcall: number }>;
  /** Ack calls rollcallProcessor sent, over all rounds, per job. */
  ackCallsPerJob: number;
  /** Median time from sending an ack call to its answer: what a job waits for beyond BullMQ. */
  ackCallMedianMs: number;
}

/** Queues `jobs` jobs, then times one worker (concurrency 100) from start until the last completion. */
async function timeWorker(jobs: number, enqueue: (queue: Queue) => Promise<void>, processor: Processor): Promise<number> {
  const queue = new Queue(`rollcall-bench-e2e-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`, { connection });
  try {
    await enqueue(queue);
    let completed = 0;
    const started = process.hrtime.bigint();
    await new Promise<void>((resolve, reject) => {
      const worker = new Worker(queue.name, processor, { connection, concurrency: CONCURRENCY });
      worker.on('failed', (_job, error) => reject(error));
      worker.on('completed', () => {
        if (++completed === jobs) void worker.close().then(resolve);
      });
    });
    return jobs / (Number(process.hrtime.bigint() - started) / 1e9);
  } finally {
    await queue.obliterate({ force: true });
    await queue.close();
  }
}

async function addJobs(queue: Queue, datas: Array<Record<string, unknown>>): Promise<void> {
  await queue.addBulk(datas.map((data) => ({ name: 'job', data, opts: { removeOnComplete: true } })));
}

/**
 * BullMQ end to end on Redis at 127.0.0.1:6379, in this process: jobs/s of a no-op worker, plain
 * and wrapped in rollcallProcessor (which acks every job's item at the rollcall service at `url`
 * before the job completes). Rounds alternate, as the machine's speed drifts.
 */
export async function runBullmqEndToEnd(url: string, jobs = 20_000, roundCount = 3): Promise<BullmqEndToEndResult> {
  let ackCalls = 0;
  const callMs: number[] = [];
  const counting: typeof fetch = async (input, init) => {
    if (!String(input).endsWith('/v1/acks')) return fetch(input, init);
    ackCalls++;
    const started = performance.now();
    const response = await fetch(input, init);
    callMs.push(performance.now() - started);
    return response;
  };
  const client = new RollcallClient({ baseUrl: url, fetch: counting });
  const rounds: Array<{ plain: number; rollcall: number }> = [];
  for (let round = 0; round < roundCount; round++) {
    const plain = await timeWorker(
      jobs,
      async (queue) => {
        for (let from = 0; from < jobs; from += 1000)
          await addJobs(
            queue,
            Array.from({ length: Math.min(1000, jobs - from) }, (_, i) => ({ n: from + i })),
          );
      },
      async () => undefined,
    );
    const rollcall = await timeWorker(
      jobs,
      async (queue) => {
        await openBatch(client, {
          count: jobs,
          enqueue: (ids) =>
            addJobs(
              queue,
              ids.map((rollcallItemId) => ({ rollcallItemId })),
            ),
        });
      },
      rollcallProcessor(client, async () => undefined),
    );
    rounds.push({ plain, rollcall });
  }
  const median = <T>(items: T[], by: (t: T) => number): T => [...items].sort((a, b) => by(a) - by(b))[Math.floor(items.length / 2)]!;
  const middle = median(rounds, (r) => r.rollcall / r.plain);
  return {
    jobs,
    concurrency: CONCURRENCY,
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a package's own version, read once
    bullmqVersion: (require('bullmq/package.json') as { version: string }).version,
    plainPerSecond: middle.plain,
    rollcallPerSecond: middle.rollcall,
    ratio: middle.rollcall / middle.plain,
    rounds,
    ackCallsPerJob: ackCalls / (jobs * roundCount),
    ackCallMedianMs: median(callMs, (ms) => ms),
  };
}
