import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import path from 'node:path';
import readline from 'node:readline';
import v8 from 'node:v8';
import vm from 'node:vm';

import { DelayedError, FlowProducer, Job, JobsOptions, Queue, UnrecoverableError, Worker } from 'bullmq';
import {
  DelayedError as OtherDelayedError,
  Job as OtherJob,
  Processor as OtherProcessor,
  UnrecoverableError as OtherUnrecoverableError,
  Worker as OtherWorker,
} from 'bullmq5';
import IORedis from 'ioredis';

import { Batch, HttpSend, httpSend, RollcallClient } from '../../src/client';
import { handedToChild, rollcallProcessor, SUCCESS_UNRECORDED, watchFailedJobs } from '../../src/integrations/bullmq';
import { openBatch } from '../../src/integrations/producer';
import { backends, describeEachOrSkip, serverBackends } from '../helpers/backends';
import { describeWith, redisConnection, redisUrl } from '../helpers/brokers';
import { acksRefusedWhile, AckTally, countingFetch, swappingToken } from '../helpers/countingFetch';
import { realSleep, until } from '../helpers/realTime';
import { holdBatchRow, serviceWithRowHolder } from '../helpers/rowLocks';
import { startService, TestService } from '../helpers/service';
import { TcpProxy } from '../helpers/tcpProxy';
import { kindOf, permanentMessage, runTestJob, TestJobData, unrecoverableMessage } from './fixtures/jobs';

const ROOT = path.resolve(__dirname, '../..');

// A full collection on demand, to tell memory kept from memory not yet collected.
v8.setFlagsFromString('--expose-gc');
const collectGarbage = vm.runInNewContext('gc') as () => void;

describeWith(redisUrl).each(backends())('rollcall/bullmq on a real Redis and a real rollcall service (%s)', (_name, backend) => {
  const connection = redisConnection(redisUrl ?? 'redis://127.0.0.1:6379');
  const prefix = `rollcall-test-${randomBytes(4).toString('hex')}`;
  let svc: TestService;
  let tally: AckTally;
  let client: RollcallClient;
  const queues: Queue[] = [];
  const workers: Worker[] = [];

  beforeAll(async () => {
    svc = await startService(backend);
  });
  beforeEach(() => {
    tally = countingFetch();
    client = new RollcallClient({ baseUrl: svc.url, fetch: tally.fetch });
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.close()));
  });
  afterAll(async () => {
    for (const queue of queues) {
      await queue.obliterate({ force: true });
      await queue.close();
    }
    await svc.stop();
  });

  /**
   * The Worker with its failure watch stopped before its first job, so the processor's auto-start
   * leaves it off: every failure recorded is then the processor's own ack. (Else the watch records
   * a last failure the processor got wrong, from BullMQ's `failed` event, and the test cannot tell.)
   */
  function processorOnly<W extends Worker>(worker: W): W {
    void watchFailedJobs(client, worker, { recoverFailedWithinMs: 0 })();
    return worker;
  }

  /** Waits for each batch to complete and for BullMQ to finish its queue; expects both to show all `count` jobs `outcome`. */
  async function expectAllFinished(outcome: 'succeeded' | 'failed', count: number, ...pairs: Array<[Queue<TestJobData>, Batch]>): Promise<void> {
    for (const [, batch] of pairs)
      expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', [outcome]: count, pending: 0 });
    const state = outcome === 'succeeded' ? 'completed' : 'failed';
    for (const [queue] of pairs) {
      await settled(queue, count);
      expect(await queue.getJobCounts(state)).toEqual({ [state]: count });
    }
  }

  /** Runs `work` while test/integrations/fixtures/bullmqWorker.ts works `queue` in a process of its own (`env`: its settings). */
  async function withWorkerProcess(queue: Queue, env: Record<string, string>, work: () => Promise<void>): Promise<void> {
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/integrations/fixtures/bullmqWorker.ts'], {
      cwd: ROOT,
      env: { ...process.env, ROLLCALL_URL: svc.url, REDIS_URL: redisUrl, QUEUE: queue.name, PREFIX: prefix, ...env },
      stdio: 'ignore', // its sandbox children warn of listeners on the pipes they share
    });
    try {
      await work();
    } finally {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM'); // the worker closes, and with it its sandbox child processes
      await exited;
    }
  }

  function newQueue(): Queue<TestJobData> {
    const queue = new Queue<TestJobData>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
    queues.push(queue);
    return queue;
  }

  /** Opens and seals a batch of `count` items through rollcall/producer, one job per item (attempts: 3 unless said). */
  async function produce(queue: Queue<TestJobData>, count: number, opts: JobsOptions = { attempts: 3 }): Promise<Batch> {
    let n = 0;
    return openBatch(client, {
      count,
      enqueue: async (ids) => {
        await queue.addBulk(ids.map((id) => ({ name: 'item', data: { rollcallItemId: id, n: n++ }, opts: { ...opts, removeOnComplete: false } })));
      },
    });
  }

  async function settled(queue: Queue, count: number, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const counts = await queue.getJobCounts('completed', 'failed');
      if ((counts.completed ?? 0) + (counts.failed ?? 0) >= count) return;
      if (Date.now() > deadline) throw new Error(`BullMQ did not finish the jobs: ${JSON.stringify(counts)}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  function expectedOutcome(count: number): { succeeded: number; failed: number; failedIds: (ids: string[]) => string[] } {
    let failed = 0;
    for (let n = 0; n < count; n++) if (kindOf(n) === 'permanent' || kindOf(n) === 'unrecoverable') failed++;
    return { succeeded: count - failed, failed, failedIds: (ids) => ids };
  }

  it('when 3,000 jobs (attempts 3) fail for good or at first, then exact counts, one completion, few calls', async () => {
    const queue = newQueue();
    const runs = new Map<number, number>();
    const itemOf = new Map<number, string>();
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor(client, (job: Job<TestJobData>) => {
          runs.set(job.data.n, (runs.get(job.data.n) ?? 0) + 1);
          itemOf.set(job.data.n, job.data.rollcallItemId);
          return runTestJob(job);
        }),
        { connection, prefix, concurrency: 50 },
      ),
    );
    const batch = await produce(queue, 3000);
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 60_000 });
    await settled(queue, 3000);

    const expected = expectedOutcome(3000);
    expect(done).toMatchObject({ state: 'complete', outcome: 'failed', total: 3000, succeeded: expected.succeeded, failed: expected.failed, pending: 0 });
    expect(await client.status(batch.id)).toMatchObject({ succeeded: expected.succeeded, failed: expected.failed });
    expect(tally.completions.get(batch.id)).toBe(1);
    // Each job was retried as BullMQ decided, and not once more: rollcall's acks did not change that.
    for (let n = 0; n < 3000; n++) expect([n, runs.get(n)]).toEqual([n, { permanent: 3, flaky: 2, unrecoverable: 1, ok: 1 }[kindOf(n)]]);
    const counts = await queue.getJobCounts('completed', 'failed');
    expect(counts).toEqual({ completed: expected.succeeded, failed: expected.failed });
    expect(tally.calls).toBeLessThan(3000 / 5); // far fewer calls than jobs (merges shrink when acks are quick)
    // A failure the processor recorded is not acked again by the Worker's failure watch.
    expect(tally.failedIds).toBe(expected.failed);
    expect(tally.largestCall).toBeLessThanOrEqual(10_000);

    // The reasons kept are those of the jobs that failed for good, with their messages; no flaky one.
    const reasons = new Map<string, string>();
    for (let cursor: string | undefined; ;) {
      const page = await client.failures(batch.id, { limit: 500, cursor });
      for (const failure of page.failures) reasons.set(failure.id, failure.error);
      if (!page.nextCursor) break;
      cursor = page.nextCursor;
    }
    const wanted = new Map<string, string>();
    for (let n = 0; n < 3000; n++) {
      if (kindOf(n) === 'permanent') wanted.set(itemOf.get(n)!, permanentMessage(n));
      if (kindOf(n) === 'unrecoverable') wanted.set(itemOf.get(n)!, unrecoverableMessage(n));
    }
    expect(reasons).toEqual(wanted);
  });

  it('when a batch is cancelled before its jobs run, then none of them runs and BullMQ completes them', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 200);
    await client.cancel(batch.id);
    let runs = 0;
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor(client, async () => void runs++),
        { connection, prefix, concurrency: 20 },
      ),
    );
    await settled(queue, 200);
    expect(runs).toBe(0);
    expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 200, failed: 0 });
    expect(await client.status(batch.id)).toMatchObject({ state: 'cancelled', succeeded: 0, failed: 0, pending: 200 });
  });

  it('when a job opens a child batch for its own item and returns handedToChild, then its item waits for the child, which records its outcome, also after a rerun', async () => {
    const queue = newQueue();
    const childQueue = newQueue();
    const parent = await produce(queue, 3, { attempts: 2 });
    let child = '';
    let forkRuns = 0;
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor(client, async (job) => {
          if (job.data.n !== 0) return 'done';
          forkRuns += 1;
          let n = 100;
          const opened = await openBatch(client, {
            count: 4,
            parentItem: job.data.rollcallItemId,
            enqueue: async (ids) => void (await childQueue.addBulk(ids.map((id) => ({ name: 'item', data: { rollcallItemId: id, n: n++ } })))),
          });
          child = opened.id;
          // The first run dies after the fan-out (as a worker killed before its job completed): the rerun takes the child over.
          if (job.attemptsMade === 0) throw new Error('died after the fan-out');
          return handedToChild(`forked ${opened.id}`);
        }),
        { connection, prefix, concurrency: 3 },
      ),
    );
    await settled(queue, 3);
    expect(await client.status(parent.id)).toMatchObject({ state: 'sealed', succeeded: 2, pending: 1 });
    const forking = (await queue.getJobs(['completed'])).find((job) => job.data.n === 0);
    expect([forking?.returnvalue, forkRuns]).toEqual([`forked ${child}`, 2]);
    expect(await childQueue.count()).toBe(4); // enqueued once

    workers.push(
      new Worker<TestJobData>(
        childQueue.name,
        rollcallProcessor(client, async (job) => {
          if (job.data.n === 103) throw new Error('one part failed');
        }),
        { connection, prefix, concurrency: 4 },
      ),
    );
    expect(await client.waitForCompletion(child, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', succeeded: 3, failed: 1 });
    expect(await svc.rollcall.childOutcomes.deliverDue()).toBe(1); // what the service's loop does within a few seconds
    expect(await client.status(parent.id)).toMatchObject({ state: 'complete', succeeded: 2, failed: 1 });
    expect((await client.failures(parent.id)).failures.map((f) => f.error)).toEqual(['child batch failed']);
  });

  it('when a job hands its item to a child but returns a result BullMQ cannot store, then the job fails and no watch records the item, which waits for its child', async () => {
    const queue = newQueue();
    const parent = await produce(queue, 1, { attempts: 1 });
    let child = '';
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor(client, async (job) => {
          const opened = await openBatch(client, { count: 1, parentItem: job.data.rollcallItemId, enqueue: () => undefined });
          child = opened.id;
          return handedToChild(BigInt(1) as unknown as string);
        }),
        { connection, prefix },
      ),
    );
    await settled(queue, 1);
    const [failed] = await queue.getJobs(['failed']);
    expect(failed?.failedReason).toMatch(/^the handler handed its item to a child batch, but /);
    await realSleep(500); // the failure watch (started by the processor) would have acked by now
    expect(await client.status(parent.id)).toMatchObject({ state: 'sealed', failed: 0, pending: 1 });
    expect((await client.list({ parent: parent.id })).batches.map((b) => b.id)).toEqual([child]);
  });

  it('when a batch is cancelled mid-run, then the first rejected ack stops its remaining jobs', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 1000);
    let runs = 0;
    const handler = async (job: Job<TestJobData>) => {
      runs++;
      await new Promise((resolve) => setTimeout(resolve, 10));
      return job.data.n;
    };
    workers.push(
      new Worker<TestJobData>(queue.name, rollcallProcessor(client, handler, { cancelCheckIntervalMs: 0 }), { connection, prefix, concurrency: 10 }),
    );
    for (;;) {
      const now = await client.status(batch.id);
      if (now.succeeded >= 100) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const cancelled = await client.cancel(batch.id);
    const runsAtCancel = runs;
    await settled(queue, 1000);
    // Jobs already running finish; a few more may start before the first rejection comes back.
    expect(runs - runsAtCancel).toBeLessThan(50);
    expect(await client.status(batch.id)).toMatchObject({ state: 'cancelled', succeeded: cancelled.succeeded, failed: 0 });
    expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 1000, failed: 0 });
  });

  it("when a job throws BullMQ's rate-limit error, then it reruns unrecorded; an SDK's RateLimitError fails it for good", async () => {
    const queue = newQueue();
    const batch = await produce(queue, 20, { attempts: 1 });
    /** What an API client library might throw: BullMQ fails the job like any other error (its message is not BullMQ's). */
    class RateLimitError extends Error {
      override name = 'RateLimitError';
    }
    const limited = new Set<number>();
    const worker: Worker<TestJobData> = new Worker<TestJobData>(
      queue.name,
      rollcallProcessor(client, async (job: Job<TestJobData>) => {
        if (job.data.n % 2 === 1) throw new RateLimitError(`429 from the API for job ${job.data.n}`);
        if (limited.has(job.data.n)) return job.data.n;
        limited.add(job.data.n);
        await worker.rateLimit(50);
        throw Worker.RateLimitError(); // BullMQ puts the job back without counting an attempt
      }),
      { connection, prefix, concurrency: 5 },
    );
    workers.push(worker);
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
    expect(done).toMatchObject({ state: 'complete', succeeded: 10, failed: 10, pending: 0 });
    const failures = (await client.failures(batch.id, { limit: 100 })).failures.map((f) => f.error).sort();
    expect(failures).toEqual([1, 3, 5, 7, 9, 11, 13, 15, 17, 19].map((k) => `429 from the API for job ${k}`).sort());
  });

  it('when a job parks itself with a subclass of DelayedError on its only attempt, then it reruns unrecorded and succeeds', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 10, { attempts: 1 });
    /** BullMQ moves the job by class as well as by name; this one's name is its own ('ParkForLater'). */
    class ParkForLater extends DelayedError {}
    const parked = new Set<number>();
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor(client, async (job: Job<TestJobData>, token?: string) => {
          if (parked.has(job.data.n)) return job.data.n;
          parked.add(job.data.n);
          await job.moveToDelayed(Date.now() + 50, token);
          throw new ParkForLater();
        }),
        { connection, prefix, concurrency: 5 },
      ),
    );
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
    expect(done).toMatchObject({ state: 'complete', succeeded: 10, failed: 0, pending: 0 });
  });

  it("when the Worker is another installed copy of bullmq, then a subclass of that copy's UnrecoverableError is recorded failed at once, and one of its DelayedError is not recorded", async () => {
    // bullmq 5 beside this project's bullmq 6: an app whose bullmq is not the one rollcall resolves.
    // Each subclass has a name of its own and is no instance of rollcall's bullmq's class.
    class ParkForLater extends OtherDelayedError {}
    class GiveUp extends OtherUnrecoverableError {}
    const queue = newQueue();
    // The parked jobs on their only attempt (were it taken for a failure, it would be their last); the others with attempts to spare.
    const batch = await produceEach(
      queue,
      Array.from({ length: 10 }, (_, n) => ({ attempts: n % 2 === 1 ? 3 : 1 })),
    );
    const parked = new Set<number>();
    const other = new OtherWorker<TestJobData>(
      queue.name,
      rollcallProcessor(client, async (anyJob: Job<TestJobData>, token?: string) => {
        const job = anyJob as unknown as OtherJob<TestJobData>;
        if (job.data.n % 2 === 1) throw new GiveUp(`job ${job.data.n} gave up`);
        if (parked.has(job.data.n)) return job.data.n;
        parked.add(job.data.n);
        await job.moveToDelayed(Date.now() + 50, token);
        throw new ParkForLater();
      }) as unknown as OtherProcessor<TestJobData>,
      { connection, prefix, concurrency: 5 },
    );
    processorOnly(other as unknown as Worker);
    workers.push(other as unknown as Worker);
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 15_000 });
    expect(done).toMatchObject({ state: 'complete', succeeded: 5, failed: 5, pending: 0 });
    expect((await client.failures(batch.id, { limit: 100 })).failures.map((f) => f.error).sort()).toEqual([1, 3, 5, 7, 9].map((n) => `job ${n} gave up`));
  });

  it("when the Worker's backoff strategy stops a job's retries, then its failure is recorded at once", async () => {
    const queue = newQueue();
    const batch = await produce(queue, 10, { attempts: 3, backoff: { type: 'give-up-on-stop' } });
    const backoffStrategy = (_attemptsMade: number, _type?: string, error?: Error) => (error?.message.startsWith('stop') ? -1 : 10);
    const runs = new Map<number, number>();
    workers.push(
      processorOnly(
        new Worker<TestJobData>(
          queue.name,
          rollcallProcessor(
            client,
            async (job: Job<TestJobData>) => {
              runs.set(job.data.n, (runs.get(job.data.n) ?? 0) + 1);
              if (job.data.n % 2 === 0) throw new Error(`stop: job ${job.data.n} cannot succeed`);
              if (job.attemptsMade === 0) throw new Error('flaky, first attempt');
            },
            { backoffStrategy },
          ),
          { connection, prefix, concurrency: 5, settings: { backoffStrategy } },
        ),
      ),
    );
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
    expect(done).toMatchObject({ state: 'complete', succeeded: 5, failed: 5, pending: 0 });
    expect([...runs.entries()].sort(([a], [b]) => a - b)).toEqual([...Array(10).keys()].map((n) => [n, n % 2 === 0 ? 1 : 2]));
    const failures = (await client.failures(batch.id, { limit: 100 })).failures.map((f) => f.error).sort();
    expect(failures).toEqual([0, 2, 4, 6, 8].map((k) => `stop: job ${k} cannot succeed`).sort());
  });

  it('when a handler throws a value that is not an Error, then the backoff strategy is asked about that value, as BullMQ asks it', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 6, { attempts: 3, backoff: { type: 'give-up-on-fatal' } });
    // Written for Errors: BullMQ hands it the thrown string, which has no message, so it retries.
    const backoffStrategy = (_attemptsMade: number, _type?: string, error?: Error) => (error?.message?.startsWith('fatal') ? -1 : 10);
    const runs = new Map<number, number>();
    workers.push(
      processorOnly(
        new Worker<TestJobData>(
          queue.name,
          rollcallProcessor(client, async (job: Job<TestJobData>) => {
            runs.set(job.data.n, (runs.get(job.data.n) ?? 0) + 1);
            if (job.attemptsMade === 0) throw `fatal: job ${job.data.n}, first attempt`;
          }),
          { connection, prefix, concurrency: 3, settings: { backoffStrategy } },
        ),
      ),
    );
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
    expect(done).toMatchObject({ state: 'complete', succeeded: 6, failed: 0, pending: 0 });
    expect([...runs.values()]).toEqual([2, 2, 2, 2, 2, 2]);
    await settled(queue, 6);
    expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 6, failed: 0 });
  });

  it('when only the Worker is given maxStartedAttempts or a backoff strategy that stops, then the processor reads them there and records the last failure', async () => {
    const stopping = newQueue();
    const started = newQueue();
    const stoppingBatch = await produce(stopping, 4, { attempts: 3, backoff: { type: 'give-up' } });
    const startedBatch = await produce(started, 4, { attempts: 3 });
    const fail = rollcallProcessor<TestJobData, string>(client, async (job) => {
      throw new Error(`job ${job.data.n} failed`);
    });
    workers.push(
      processorOnly(new Worker<TestJobData>(stopping.name, fail, { connection, prefix, concurrency: 4, settings: { backoffStrategy: () => -1 } })),
      processorOnly(new Worker<TestJobData>(started.name, fail, { connection, prefix, concurrency: 4, maxStartedAttempts: 1 })),
    );
    // BullMQ runs each job once; the processor, not told the Worker's options, must see that too.
    await expectAllFinished('failed', 4, [stopping, stoppingBatch], [started, startedBatch]);
  });

  it("when the processor is given maxStartedAttempts or a backoff strategy that the Worker running it does not have, then the Worker's decide, as they decide for BullMQ", async () => {
    const started = newQueue();
    const stopping = newQueue();
    const startedBatch = await produce(started, 4, { attempts: 2 });
    const stoppingBatch = await produce(stopping, 4, { attempts: 2, backoff: { type: 'custom' } });
    const flakyOnce = async (job: Job<TestJobData>) => {
      if (job.attemptsMade === 0) throw new Error(`job ${job.data.n}, first attempt`);
      return 'ok';
    };
    // Options meant for a sandbox, given to Workers that say otherwise: BullMQ retries each job once.
    const processor = rollcallProcessor<TestJobData, string>(client, flakyOnce, { maxStartedAttempts: 1, backoffStrategy: () => -1 });
    workers.push(
      processorOnly(new Worker<TestJobData>(started.name, processor, { connection, prefix, concurrency: 4 })),
      processorOnly(new Worker<TestJobData>(stopping.name, processor, { connection, prefix, concurrency: 4, settings: { backoffStrategy: () => 10 } })),
    );
    await expectAllFinished('succeeded', 4, [started, startedBatch], [stopping, stoppingBatch]);
  });

  it("when a job's built-in backoff delay is -1, then BullMQ does not retry it and the processor records its first failure", async () => {
    const queue = newQueue();
    const batch = await produce(queue, 4, { attempts: 3, backoff: -1 });
    let runs = 0;
    const fail = rollcallProcessor<TestJobData, string>(client, async (job) => {
      runs += 1;
      throw new Error(`job ${job.data.n} failed`);
    });
    workers.push(processorOnly(new Worker<TestJobData>(queue.name, fail, { connection, prefix, concurrency: 4 })));
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', failed: 4, pending: 0 });
    await settled(queue, 4);
    expect(await queue.getJobCounts('failed')).toEqual({ failed: 4 });
    expect(runs).toBe(4);
  });

  /**
   * Jobs 0 … count − 1 (three attempts each) run by a processor that reads their IDs with `itemIdOf`:
   * which ran, how the others failed (attempts, reason with `<id>` for the job's id), the Worker's
   * `error` events and the batch's status, once the failure watch has had its turn.
   */
  async function runWithItemIdOf(count: number, itemIdOf: (job: Job<TestJobData>) => string | undefined) {
    const queue = newQueue();
    const batch = await produce(queue, count, { attempts: 3 });
    const ran: number[] = [];
    const processor = rollcallProcessor(client, async (job: Job<TestJobData>) => void ran.push(job.data.n), { itemIdOf });
    const worker = new Worker<TestJobData>(queue.name, processor, { connection, prefix, concurrency: count });
    const errors: Error[] = [];
    worker.on('error', (error) => errors.push(error));
    workers.push(worker);
    await settled(queue, count);
    await realSleep(300); // the failure watch's turn, after BullMQ's `failed` events; a rejection left unhandled is reported by then
    const failed = (await queue.getFailed())
      .map((job) => [job.data.n, job.attemptsMade, job.failedReason.replace(`job ${job.id}`, 'job <id>')] as const)
      .sort(([a], [b]) => a - b);
    return { ran: ran.sort((a, b) => a - b), failed, errors, status: await client.status(batch.id) };
  }

  it('when itemIdOf gives a job no string, then that job fails at once without running, unretried; the rest complete', async () => {
    // A numeric field, say: not an item ID, though it is not undefined either.
    const run = await runWithItemIdOf(10, (job) => (job.data.n % 2 === 1 ? (job.data.n as unknown as string) : job.data.rollcallItemId));
    expect(run.errors).toEqual([]); // each failure says why itself: the watch does not report it again
    expect(run.failed).toEqual([1, 3, 5, 7, 9].map((n) => [n, 1, 'job <id> has no rollcall item ID']));
    expect(run.ran).toEqual([0, 2, 4, 6, 8]);
    expect(run.status).toMatchObject({ succeeded: 5, failed: 0, pending: 5 });
  });

  it('when itemIdOf is async (plain JavaScript lets it be) and its promises reject, then none goes unhandled, and each job fails at once saying why, unretried, without running', async () => {
    const asyncItemIdOf = async (): Promise<string> => Promise.reject(new Error('no ID to be read'));
    const run = await runWithItemIdOf(4, asyncItemIdOf as unknown as (job: Job<TestJobData>) => string);
    expect(run.errors).toEqual([]);
    expect(run.failed).toEqual([0, 1, 2, 3].map((n) => [n, 1, 'itemIdOf gave a promise; it must give the item ID itself (not async)']));
    expect(run.ran).toEqual([]);
    expect(run.status).toMatchObject({ succeeded: 0, failed: 0, pending: 4 });
  });

  it('when itemIdOf throws on some jobs, then those fail at once saying why, unretried, without running; the rest complete', async () => {
    const run = await runWithItemIdOf(6, (job) => {
      if (job.data.n % 2 === 1) throw new Error(`no ID in job ${job.data.n}`);
      return job.data.rollcallItemId;
    });
    expect(run.errors).toEqual([]);
    expect(run.failed).toEqual([1, 3, 5].map((n) => [n, 1, `itemIdOf threw for job <id>: no ID in job ${n}`]));
    expect(run.ran).toEqual([0, 2, 4]);
    expect(run.status).toMatchObject({ succeeded: 3, failed: 0, pending: 3 });
  });

  it("when one process runs two workers with one client, then their acks share calls (the process's acks are coalesced)", async () => {
    const send = httpSend();
    const batchesPerCall: number[] = [];
    const sharing = new RollcallClient({
      baseUrl: svc.url,
      fetch: (url, request) => {
        if (url.endsWith('/v1/acks'))
          batchesPerCall.push(new Set((JSON.parse(String(request.body)) as { ids: string[] }).ids.map((id) => id.split(':')[0])).size);
        return send(url, request);
      },
    });
    const pair = [newQueue(), newQueue()];
    const batches = await Promise.all(pair.map((queue) => produce(queue, 500)));
    // The first jobs wait until both workers run one, so that both have acks to send at once.
    const running = new Set<string>();
    let bothRunning!: () => void;
    const barrier = new Promise<void>((resolve) => (bothRunning = resolve));
    for (const queue of pair)
      workers.push(
        new Worker<TestJobData>(
          queue.name,
          rollcallProcessor(sharing, async () => {
            running.add(queue.name);
            if (running.size === 2) bothRunning();
            await barrier;
            return 'done';
          }),
          { connection, prefix, concurrency: 50 },
        ),
      );
    for (const batch of batches)
      expect(await client.waitForCompletion(batch.id, { timeoutMs: 30_000 })).toMatchObject({ state: 'complete', succeeded: 500, pending: 0 });
    expect(Math.max(...batchesPerCall)).toBe(2);
  });

  it('when one process runs two workers with one client on one batch, then the batch is looked up for cancel once per interval, not once per worker', async () => {
    const send = httpSend();
    let lookups = 0;
    const counting = new RollcallClient({
      baseUrl: svc.url,
      fetch: (url, request) => {
        if (url.includes('/v1/items/')) lookups += 1;
        return send(url, request);
      },
    });
    const queue = newQueue();
    const batch = await produce(queue, 200);
    for (let i = 0; i < 2; i++)
      workers.push(
        new Worker<TestJobData>(
          queue.name,
          rollcallProcessor(counting, async () => 'done', { cancelCheckIntervalMs: 60_000 }),
          { connection, prefix, concurrency: 20 },
        ),
      );
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 30_000 })).toMatchObject({ state: 'complete', succeeded: 200 });
    expect(lookups).toBe(1);
  });

  it('when a cancel look-up hangs after the first answer while the jobs of its batch keep coming, then they go on with that answer and complete', async () => {
    const send = httpSend();
    let lookups = 0;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const hanging = new RollcallClient({
      baseUrl: svc.url,
      fetch: async (url, request) => {
        if (url.includes('/v1/items/') && ++lookups > 1) await released; // every look-up after the first, until the test ends
        return send(url, request);
      },
    });
    const queue = newQueue();
    const batch = await produce(queue, 500);
    const handler = async () => {
      await realSleep(10); // 500 jobs on 10 slots: 500 ms at least, past the interval below
      return 'done';
    };
    workers.push(
      new Worker<TestJobData>(queue.name, rollcallProcessor(hanging, handler, { cancelCheckIntervalMs: 300 }), { connection, prefix, concurrency: 10 }),
    );
    try {
      expect(await client.waitForCompletion(batch.id, { timeoutMs: 30_000 })).toMatchObject({ state: 'complete', succeeded: 500 });
      expect(lookups).toBe(2); // the first, which the first jobs waited for, and one asking again behind the others
    } finally {
      release();
    }
  });

  it("when the handler takes BullMQ's abort signal, then it gets it; when it does not, BullMQ makes none", async () => {
    const queue = newQueue();
    const batch = await produce(queue, 20);
    const signals: unknown[] = [];
    const withSignal = rollcallProcessor(client, async (_job: Job<TestJobData>, _token?: string, signal?: AbortSignal) => void signals.push(signal));
    workers.push(new Worker<TestJobData>(queue.name, withSignal, { connection, prefix, concurrency: 5 }));
    await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
    expect(signals).toHaveLength(20);
    for (const signal of signals) expect(signal).toBeInstanceOf(AbortSignal);
    // BullMQ makes an AbortController for every job of a processor with a third parameter
    // (Worker: `processorAcceptsSignal = processor.length >= 3`); a handler without one needs none.
    expect(withSignal.length).toBe(3);
    expect(rollcallProcessor(client, async (job: Job<TestJobData>) => job.data.n).length).toBeLessThan(3);
  });

  it('when the processor runs sandboxed, then a subclass of UnrecoverableError (which BullMQ retries from a sandbox) is not recorded as failed', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 30);
    await withWorkerProcess(queue, { SANDBOX: '1' }, async () => {
      const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
      expect(done).toMatchObject({ state: 'complete', succeeded: 20, failed: 10 });
      await settled(queue, 30);
      expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 20, failed: 10 });
      const reasons = (await client.failures(batch.id, { limit: 100 })).failures.map((f) => f.error).sort();
      expect(reasons).toEqual(Array.from({ length: 10 }, (_, i) => `gone ${3 * i + 1}`).sort());
    });
  });

  it("when a sandboxed handler's error has a cause, then the backoff strategy is asked about it as BullMQ's Worker gets it, through JSON, and a retried failure is not recorded", async () => {
    const queue = newQueue();
    const batch = await produce(queue, 6, { attempts: 3, backoff: { type: 'custom' } });
    await withWorkerProcess(queue, { SANDBOX: '1', SANDBOX_FILE: 'sandboxedCause.ts' }, async () => {
      const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
      expect(done).toMatchObject({ state: 'complete', succeeded: 6, failed: 0 });
      await settled(queue, 6);
      expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 6, failed: 0 });
    });
  });

  it('when a sandbox on worker threads cannot hand a result to its Worker (a function in it, a BigInt behind a toJSON), then no success is recorded: the jobs fail in rollcall as in BullMQ', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 6, { attempts: 2 });
    await withWorkerProcess(queue, { SANDBOX: '1', SANDBOX_FILE: 'sandboxedUncloneable.ts', SANDBOX_THREADS: '1' }, async () => {
      const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
      expect(done).toMatchObject({ state: 'complete', succeeded: 0, failed: 6 });
      await settled(queue, 6);
      expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 0, failed: 6 });
      const reasons = (await client.failures(batch.id, { limit: 100 })).failures.map((f) => f.error);
      expect([...reasons].sort()).toEqual([
        ...Array(3).fill(expect.stringMatching(/BigInt/)),
        ...Array(3).fill(expect.stringMatching(/^the handler's result cannot leave the sandbox's worker thread: .*could not be cloned/)),
      ]);
      expect((await queue.getFailed()).map((job) => job.failedReason).sort()).toEqual([...reasons].sort());
    });
  });

  it("when rollcall refuses a job's last failure (its batch was deleted), then the job's failure says so", async () => {
    const queue = newQueue();
    const batch = await produce(queue, 2, { attempts: 1 });
    await client.delete(batch.id);
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor<TestJobData, string>(client, async () => {
          throw new Error('boom');
        }),
        { connection, prefix, concurrency: 2 },
      ),
    );
    await settled(queue, 2);
    const failed = await queue.getFailed();
    expect(failed.map((job) => job.failedReason)).toEqual([
      expect.stringMatching(/^boom \(and rollcall rejected the failure of item .+: unknown_batch\)$/),
      expect.stringMatching(/^boom \(and rollcall rejected the failure of item .+: unknown_batch\)$/),
    ]);
  });

  /** A Worker whose jobs all succeed, acking through `through` with a short retryForMs. */
  function succeedingWorker(queue: Queue, through: RollcallClient, options: { autorun?: boolean } = {}): Worker<TestJobData> {
    return new Worker<TestJobData>(
      queue.name,
      rollcallProcessor<TestJobData, string>(through, async () => 'done', { retryForMs: 300 }),
      {
        connection,
        prefix,
        concurrency: 2,
        ...options,
      },
    );
  }

  it('when a job succeeds on its last attempt but rollcall does not take its ack in time, then BullMQ fails the job and the failure watch records the item succeeded', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 1, { attempts: 1 });
    const outage = acksRefusedWhile(svc.url);
    const worker = succeedingWorker(queue, outage.client, { autorun: false });
    worker.on('failed', () => (outage.refusing = false)); // before the processor's watch, which it starts on its first job
    workers.push(worker);
    void worker.run();
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', succeeded: 1, failed: 0 });
    expect((await queue.getFailed()).map((job) => job.failedReason)).toEqual([
      expect.stringMatching(/^the handler succeeded, but rollcall did not take the ack of item .+: away$/),
    ]);
  });

  it('when rollcall stays away past the failure watch’s own tries too, then the watch sends the acks again until rollcall takes them, and the batch completes', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 2, { attempts: 1 });
    const outage = acksRefusedWhile(svc.url);
    const worker = succeedingWorker(queue, outage.client);
    const unrecorded: Error[] = [];
    worker.on('error', (error) => {
      if ((error as { code?: string }).code === 'failure_unrecorded') unrecorded.push(error);
    });
    workers.push(worker);
    await until(() => unrecorded.length >= 2, 15_000); // the processor's tries, then the watch's, spent
    expect(unrecorded[0]!.message).toMatch(/could not record the failure of job .+; it is sent again after a pause while the watch runs$/);
    await realSleep(1_000); // sent again, still refused
    expect(await client.status(batch.id)).toMatchObject({ state: 'sealed', pending: 2 });
    outage.refusing = false;
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', succeeded: 2, failed: 0 });
    expect(unrecorded).toHaveLength(2); // reported once each, not at every try
  });

  /** The `failure_unrecorded` reports of `worker`'s failure watch, as they come; `then` runs on each. */
  function unrecordedReports(worker: { on(event: 'error', listener: (error: Error) => void): unknown }, then?: (error: Error) => void): Error[] {
    const reports: Error[] = [];
    worker.on('error', (error) => {
      if ((error as { code?: string }).code !== 'failure_unrecorded') return;
      reports.push(error);
      then?.(error);
    });
    return reports;
  }

  it('when the failure watch is stopped while failures wait to be sent again, then it sends them once more at its stop, and the batch completes', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 1, { attempts: 1 });
    const outage = acksRefusedWhile(svc.url);
    const worker = succeedingWorker(queue, outage.client);
    workers.push(worker);
    let stopped: Promise<void> | undefined;
    // Stopped in the turn its first try is given up, well before the pause after which it would send again.
    unrecordedReports(worker, () => {
      outage.refusing = false;
      stopped ??= watchFailedJobs(outage.client, worker)();
    });
    await until(() => stopped !== undefined, 15_000);
    await stopped;
    expect(await client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 1, pending: 0 });
  });

  it('when rollcall refuses the failure watch’s acks with a 401, then they are not sent again after the pause: a token refused would be refused again', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 1, { attempts: 1 });
    const refused = acksRefusedWhile(svc.url, 401);
    const worker = succeedingWorker(queue, refused.client);
    workers.push(worker);
    const reports = unrecordedReports(worker);
    await until(() => reports.length >= 1, 15_000);
    expect(reports[0]!.message).toMatch(/could not record the failure of job [^;]+$/); // not "sent again after a pause"
    refused.refusing = false;
    await realSleep(1_500); // five pauses of 300 ms
    expect(await client.status(batch.id)).toMatchObject({ state: 'sealed', pending: 1 });
    expect(reports).toHaveLength(1);
  });

  it('when more than 10,000 failures wait to be sent again, then the watch keeps 10,000, says which it does not keep, and sends the kept ones once rollcall is back', async () => {
    const count = 10_001;
    const ids: string[] = [];
    const batch = await openBatch(client, { count, enqueue: async (chunk) => void ids.push(...chunk) });
    const outage = acksRefusedWhile(svc.url);
    // BullMQ's `failed` events for jobs it failed for good, without running 10,001 real jobs.
    const worker = new EventEmitter() as EventEmitter & { name?: string };
    const reports = unrecordedReports(worker);
    const stop = watchFailedJobs(outage.client, worker, { retryForMs: 300, recoverFailedWithinMs: 0 });
    try {
      ids.forEach((id, n) => worker.emit('failed', { id: String(n), finishedOn: Date.now(), data: { rollcallItemId: id } }, new Error('boom')));
      await until(() => reports.length >= count, 30_000);
      const kept = reports.filter((report) => report.message.endsWith('it is sent again after a pause while the watch runs'));
      expect(kept).toHaveLength(10_000);
      outage.refusing = false;
      await until(async () => (await client.status(batch.id)).failed === 10_000, 30_000);
      await realSleep(1_000); // a pause more: nothing else is sent
      expect(await client.status(batch.id)).toMatchObject({ state: 'sealed', failed: 10_000, pending: 1 });
    } finally {
      await stop();
    }
  });

  it('when a handler throws UnrecoverableError while rollcall is out of reach, then BullMQ still does not run the job again', async () => {
    const queue = newQueue();
    await produce(queue, 2, { attempts: 3 });
    // A service gone for longer than the retries (one try here): the last failure cannot be recorded.
    const unreachable = new RollcallClient({ baseUrl: 'http://127.0.0.1:9' });
    let runs = 0;
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor<TestJobData, string>(
          unreachable,
          async () => {
            runs++;
            throw new UnrecoverableError('the file is gone');
          },
          { retry: { attempts: 1, firstDelayMs: 1 }, cancelCheckIntervalMs: 0 },
        ),
        { connection, prefix, concurrency: 2 },
      ),
    );
    // Nor can the Worker's failure watch record them: with no `error` listener on the Worker it says so
    // in a process warning each (which Node refused, as an Error of Jest's realm, until warn()).
    await settled(queue, 2);
    expect(runs).toBe(2);
    const failed = await queue.getFailed();
    expect(failed.map((job) => [job.attemptsMade, job.failedReason])).toEqual([
      [1, expect.stringMatching(/^the file is gone \(and rollcall could not record the failure: /)],
      [1, expect.stringMatching(/^the file is gone \(and rollcall could not record the failure: /)],
    ]);
  });

  it('when a handler returns what BullMQ cannot store (a BigInt), then rollcall does not record a success: the job fails as BullMQ fails it', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 1, { attempts: 2 });
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor<TestJobData, bigint>(client, async () => 10n),
        { connection, prefix },
      ),
    );
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', succeeded: 0, failed: 1 });
    expect((await client.failures(batch.id)).failures.map((f) => f.error)).toEqual([expect.stringMatching(/BigInt/)]);
    await settled(queue, 1);
    expect((await queue.getFailed()).map((job) => job.attemptsMade)).toEqual([2]);
  });

  it('when a handler throws a plain object named UnrecoverableError, then BullMQ fails the job for good and its failure is recorded with its message', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 3);
    workers.push(
      processorOnly(
        new Worker<TestJobData>(
          queue.name,
          rollcallProcessor<TestJobData, string>(client, async () => {
            throw { name: 'UnrecoverableError', message: 'gone for good' }; // a plain object, as some libraries throw
          }),
          { connection, prefix, concurrency: 3 },
        ),
      ),
    );
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', failed: 3 });
    expect((await client.failures(batch.id)).failures.map((f) => f.error)).toEqual(['gone for good', 'gone for good', 'gone for good']);
    await settled(queue, 3);
    expect(await queue.getJobCounts('failed')).toEqual({ failed: 3 });
  });

  it('when rollcall is out of reach for 3 s mid-run (a restart), then jobs on their only attempt wait for it: none fails, counts are exact', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 1200, { attempts: 1 });
    const proxy = new TcpProxy('127.0.0.1', Number(new URL(svc.url).port));
    await proxy.open();
    const throughProxy = new RollcallClient({ baseUrl: `http://127.0.0.1:${proxy.port}` });
    let runs = 0;
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor<TestJobData, string>(throughProxy, async () => {
          runs++;
          await realSleep(30);
          return 'ok';
        }),
        { connection, prefix, concurrency: 20 },
      ),
    );
    await until(() => runs >= 100);
    await proxy.cut(); // connections dropped, new ones refused
    await realSleep(3000);
    await proxy.open();
    await settled(queue, 1200);
    await proxy.cut();
    expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 1200, failed: 0 });
    expect(await client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 1200, failed: 0, pending: 0 });
  });

  /** Failures kept for a batch, by item ID. */
  async function failureReasons(batchId: string): Promise<string[]> {
    return (await client.failures(batchId, { limit: 100 })).failures.map((failure) => failure.error);
  }

  /** A handler that holds job `n` until released: its lock, not renewed, runs out and the job stalls. */
  function holdingJob(n: number): { handler: (job: Job<TestJobData>) => Promise<string>; runs: Map<number, number>; release(): void } {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const runs = new Map<number, number>();
    const handler = async (job: Job<TestJobData>) => {
      runs.set(job.data.n, (runs.get(job.data.n) ?? 0) + 1);
      if (job.data.n === n) await held;
      return 'ok';
    };
    return { handler, runs, release };
  }

  /**
   * A Worker whose locks run out in 1 s unrenewed and whose stall check runs every 500 ms: a held job
   * stalls within about 2 s; the others have 1 s to finish, their acks included.
   */
  const STALLING = { connection, prefix, concurrency: 5, lockDuration: 1000, skipLockRenewal: true, stalledInterval: 500 };

  /** Opens and seals a batch with one job per entry of `opts`, job n with opts[n]. */
  async function produceEach(queue: Queue<TestJobData>, opts: JobsOptions[]): Promise<Batch> {
    let n = 0;
    return openBatch(client, {
      count: opts.length,
      enqueue: async (ids) => {
        await queue.addBulk(ids.map((id) => ({ name: 'item', data: { rollcallItemId: id, n }, opts: { ...opts[n++], removeOnComplete: false } })));
      },
    });
  }

  it('when handlers throw one shared error object, and BullMQ stops a later job that the processor was told would retry, then the watch still records that job', async () => {
    const queue = newQueue();
    const shared = new Error('the upstream is gone'); // a module-level error, thrown for every job
    // A strategy that tells the processor "retry in 10 ms" and BullMQ, asked next, "stop" (-1).
    const asked = new Map<string | undefined, number>();
    const backoffStrategy = (_attempts: number, _type?: string, _error?: Error, job?: { id?: string }) => {
      asked.set(job?.id, (asked.get(job?.id) ?? 0) + 1);
      return asked.get(job?.id) === 1 ? 10 : -1;
    };
    // Job 0 fails on its only attempt first (the processor records it); job 1 then meets the strategy.
    const batch = await produceEach(queue, [{ attempts: 1 }, { attempts: 3, backoff: { type: 'lots' } }]);
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor<TestJobData>(client, async () => {
          throw shared;
        }),
        { connection, prefix, concurrency: 1, settings: { backoffStrategy } },
      ),
    );
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 15_000 });
    expect(done).toMatchObject({ state: 'complete', failed: 2, pending: 0 });
    expect(await queue.getJobCounts('failed')).toEqual({ failed: 2 });
  });

  it('when a handler throws a string on its only attempt, then its failure is acked once, not again by the failure watch', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 3, { attempts: 1 });
    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor<TestJobData>(client, async (job: Job<TestJobData>) => {
          throw `job ${job.data.n} broke`;
        }),
        { connection, prefix, concurrency: 3 },
      ),
    );
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', failed: 3, pending: 0 });
    await settled(queue, 3);
    await tally.settled();
    expect(tally.failedIds).toBe(3);
    expect((await failureReasons(batch.id)).sort()).toEqual(['job 0 broke', 'job 1 broke', 'job 2 broke']);
  });

  it('when a handler throws undefined or null on its last attempt, then BullMQ fails the job as rollcall records it, not leaving it to stall and run again', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 2, { attempts: 1 });
    const runs = new Map<number, number>();
    const worker = new Worker<TestJobData>(
      queue.name,
      rollcallProcessor(client, async (job: Job<TestJobData>) => {
        runs.set(job.data.n, (runs.get(job.data.n) ?? 0) + 1);
        if (runs.get(job.data.n) === 1) throw job.data.n === 0 ? undefined : null;
      }),
      // A job left active stalls within a second here, so a rerun would show within the test.
      { ...STALLING, concurrency: 2 },
    );
    worker.on('error', () => undefined);
    workers.push(worker);
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', failed: 2, pending: 0 });
    await settled(queue, 2);
    await new Promise((resolve) => setTimeout(resolve, 2000)); // two stall checks: nothing left active to rerun
    expect(await queue.getJobCounts('completed', 'failed', 'active')).toEqual({ completed: 0, failed: 2, active: 0 });
    expect(Object.fromEntries(runs)).toEqual({ 0: 1, 1: 1 });
    expect((await failureReasons(batch.id)).sort()).toEqual(['the handler threw null', 'the handler threw undefined']);
  });

  it("when a job stalls more often than maxStalledCount, then BullMQ fails it without running it and the processor's failure watch records it: the batch completes", async () => {
    const queue = newQueue();
    const holding = holdingJob(2);
    const worker = new Worker<TestJobData>(queue.name, rollcallProcessor(client, holding.handler), { ...STALLING, maxStalledCount: 0 });
    worker.on('error', () => undefined); // the held run's completion, after BullMQ failed its job
    workers.push(worker);
    try {
      const batch = await produce(queue, 3, { attempts: 3 });
      const done = await client.waitForCompletion(batch.id, { timeoutMs: 20_000 });
      expect(done).toMatchObject({ state: 'complete', succeeded: 2, failed: 1, pending: 0 });
      expect(await failureReasons(batch.id)).toEqual(['job stalled more than allowable limit']);
      expect(holding.runs.get(2)).toBe(1); // BullMQ did not run it again
      expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 2, failed: 1 });
    } finally {
      holding.release();
    }
  });

  it('when a run loses its lock and its job runs again, then its last failure is not recorded: the rerun that succeeds decides the batch', async () => {
    const queue = newQueue();
    // Run 1 of the job (its only attempt) outlives its lock (not renewed); the stall check puts the
    // job back (maxStalledCount 1) and run 2 starts. Run 1 then throws; run 2 succeeds once run 1's
    // processor has settled (whatever it acked is in by then).
    const runs: string[] = [];
    let secondStarted!: () => void;
    const second = new Promise<void>((resolve) => (secondStarted = resolve));
    let firstSettled: Promise<unknown> | undefined;
    const processor = rollcallProcessor(client, async () => {
      runs.push(`run ${runs.length + 1}`);
      if (runs.length === 1) {
        await second;
        throw new Error('run 1 failed after losing its lock');
      }
      secondStarted();
      await firstSettled;
      return 'ok';
    });
    const worker = new Worker<TestJobData>(
      queue.name,
      (job, token) => {
        const run = processor(job, token);
        firstSettled ??= run.catch(() => undefined);
        return run;
      },
      // A 2 s lock: run 2 must finish within it, or it stalls too (and past maxStalledCount fails).
      { ...STALLING, concurrency: 2, maxStalledCount: 1, lockDuration: 2000 },
    );
    worker.on('error', () => undefined); // run 1's failure, which BullMQ cannot move without the lock
    workers.push(worker);
    const batch = await produce(queue, 1, { attempts: 1 });
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 20_000 });
    expect(done).toMatchObject({ state: 'complete', outcome: 'succeeded', succeeded: 1, failed: 0, pending: 0 });
    expect(runs).toEqual(['run 1', 'run 2']);
    expect(await failureReasons(batch.id)).toEqual([]);
    await settled(queue, 1);
    expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 1, failed: 0 });
  });

  it('when a Worker started after a crash picks a job that stalled too often first, then watchFailedJobs (started with it) records that job failed', async () => {
    const queue = newQueue();
    // The crashed Worker: its one slot holds job 0 past its lock; its stall check moves the job back
    // to wait, marked to fail (maxStalledCount 0), and the slot stays taken, so it cannot pick it again.
    const holding = holdingJob(0);
    const crashed = new Worker<TestJobData>(queue.name, rollcallProcessor(client, holding.handler), { ...STALLING, concurrency: 1, maxStalledCount: 0 });
    crashed.on('error', () => undefined);
    workers.push(crashed);
    const batch = await produce(queue, 1, { attempts: 3 });
    await until(() => holding.runs.get(0) === 1);
    const waitingAgain = async () => (await queue.getJobCounts('wait')).wait === 1;
    for (let tries = 0; !(await waitingAgain()); tries++) {
      if (tries > 100) throw new Error('job 0 did not stall');
      await realSleep(50);
    }
    // The restarted Worker's first job is the stalled one: BullMQ fails it before any processor runs.
    const restarted = new Worker<TestJobData>(queue.name, rollcallProcessor(client, holding.handler), { connection, prefix, concurrency: 1 });
    workers.push(restarted);
    const stop = watchFailedJobs(client, restarted);
    try {
      const done = await client.waitForCompletion(batch.id, { timeoutMs: 20_000 });
      expect(done).toMatchObject({ state: 'complete', outcome: 'failed', failed: 1, pending: 0 });
      expect(await failureReasons(batch.id)).toEqual(['job stalled more than allowable limit']);
      expect(holding.runs.get(0)).toBe(1);
    } finally {
      holding.release();
      await stop();
    }
  });

  it('when watchFailedJobs watches a Worker whose processor does not ack (as a sandboxed one runs elsewhere), then a job started past maxStartedAttempts is recorded failed', async () => {
    const queue = newQueue();
    const holding = holdingJob(0);
    const worker = new Worker<TestJobData>(queue.name, holding.handler, { ...STALLING, maxStartedAttempts: 1 });
    worker.on('error', () => undefined);
    workers.push(worker);
    const stop = watchFailedJobs(client, worker);
    expect(watchFailedJobs(client, worker)).toBe(stop); // one watch a Worker
    try {
      const batch = await produce(queue, 1, { attempts: 3 });
      const done = await client.waitForCompletion(batch.id, { timeoutMs: 20_000 });
      expect(done).toMatchObject({ state: 'complete', outcome: 'failed', failed: 1, pending: 0 });
      expect(await failureReasons(batch.id)).toEqual(['job started more than allowable limit']);
      expect(tally.failedIds).toBe(1);
    } finally {
      holding.release();
      await stop();
    }
  });

  it('when watchFailedJobs watches a Worker whose processor throws a value without toString, then the failure is still recorded, as text', async () => {
    const queue = newQueue();
    const worker = new Worker<TestJobData>(
      queue.name,
      async () => {
        throw Object.create(null); // what String() cannot turn into text
      },
      { connection, prefix },
    );
    worker.on('error', () => undefined);
    workers.push(worker);
    const stop = watchFailedJobs(client, worker);
    try {
      const batch = await produce(queue, 1, { attempts: 1 });
      expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', failed: 1, pending: 0 });
      expect(await failureReasons(batch.id)).toEqual(['a thrown [object Object]']);
    } finally {
      await stop();
    }
  });

  it("when a Worker's failure watch was stopped, then its processor's next job does not start it again: a failure for good stays unrecorded", async () => {
    const queue = newQueue();
    const holding = holdingJob(0);
    const worker = new Worker<TestJobData>(queue.name, rollcallProcessor(client, holding.handler), { ...STALLING, maxStalledCount: 0 });
    worker.on('error', () => undefined); // the held run's completion, after BullMQ failed its job
    workers.push(worker);
    await watchFailedJobs(client, worker)(); // stopped, as at a shutdown
    try {
      const batch = await produce(queue, 2, { attempts: 3 });
      await settled(queue, 2, 20_000); // job 1 ran through the processor; job 0 was failed by BullMQ
      expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 1, failed: 1 });
      await realSleep(1000); // room for an ack that should not come
      expect(tally.failedIds).toBe(0);
      expect(await client.status(batch.id)).toMatchObject({ state: 'sealed', succeeded: 1, failed: 0, pending: 1 });
    } finally {
      holding.release();
    }
  });

  /**
   * Jobs 0 and 1 of a new batch failed for good by a Worker whose failures nothing records (as when a
   * crash cut off the watch's ack), job 2 completed; returns the batch once BullMQ has finished them.
   */
  async function failedUnrecorded(queue: Queue<TestJobData>, failing = 2): Promise<Batch> {
    const crashed = new Worker<TestJobData>(
      queue.name,
      async (job) => {
        if (job.data.n < failing) throw new UnrecoverableError(`job ${job.data.n} gave up`);
        await client.ack([job.data.rollcallItemId]);
        return 'ok';
      },
      { connection, prefix },
    );
    workers.push(crashed);
    const batch = await produce(queue, failing + 1, { attempts: 3 });
    await settled(queue, failing + 1, 20_000);
    await crashed.close();
    expect(await client.status(batch.id)).toMatchObject({ state: 'sealed', succeeded: 1, pending: failing });
    return batch;
  }

  /** A Worker of `queue` whose jobs succeed through rollcallProcessor (closed after the test). */
  function okWorker(queue: Queue<TestJobData>): Worker<TestJobData> {
    const worker = new Worker<TestJobData>(
      queue.name,
      rollcallProcessor(client, async () => 'ok'),
      { connection, prefix },
    );
    workers.push(worker);
    return worker;
  }

  /** Starts a watch of `worker` (with `options`) and resolves, with its stop, once its look-back has ended. */
  async function lookedBack(
    worker: Worker<TestJobData>,
    options: { recoverFailedWithinMs?: number } = {},
  ): Promise<{ failures: number; stop(): Promise<void> }> {
    let stop!: () => Promise<void>;
    const failures = await new Promise<number>((resolve) => (stop = watchFailedJobs(client, worker, { ...options, onRecovered: resolve })));
    return { failures, stop };
  }

  it('when a Worker failed jobs for good and their acks were lost, then watchFailedJobs started with the next Worker records them failed', async () => {
    const queue = newQueue();
    const batch = await failedUnrecorded(queue);
    const restarted = okWorker(queue);
    const stop = watchFailedJobs(client, restarted);
    try {
      const done = await client.waitForCompletion(batch.id, { timeoutMs: 10_000 });
      expect(done).toMatchObject({ state: 'complete', succeeded: 1, failed: 2, pending: 0 });
      expect((await failureReasons(batch.id)).sort()).toEqual(['job 0 gave up', 'job 1 gave up']);
    } finally {
      await stop();
    }
    expect(tally.failedIds).toBe(2);
  });

  it("when a Worker's jobs succeeded but rollcall did not take their acks, and BullMQ failed them for good, then the next Worker's look-back records them succeeded, in one call", async () => {
    const queue = newQueue();
    const crashed = new Worker<TestJobData>(
      queue.name,
      async (job) => {
        throw new UnrecoverableError(`${SUCCESS_UNRECORDED} ${job.data.rollcallItemId}: connect ECONNREFUSED`); // as rollcallProcessor fails such a run
      },
      { connection, prefix },
    );
    workers.push(crashed);
    const batch = await produce(queue, 3, { attempts: 1 });
    await settled(queue, 3, 20_000);
    await crashed.close();
    const callsBefore = tally.calls;
    const stop = watchFailedJobs(client, okWorker(queue));
    try {
      expect(await client.waitForCompletion(batch.id, { timeoutMs: 10_000 })).toMatchObject({ state: 'complete', succeeded: 3, failed: 0 });
    } finally {
      await stop();
    }
    expect(tally.calls - callsBefore).toBe(1);
  });

  it("when rollcall rejected jobs' successes (a Worker given another tenant's token), then a later Worker's look-back leaves them pending, and their retry records them succeeded", async () => {
    const scopes = ['produce', 'consume', 'read'];
    const tokens = ['a', 'b'].map((tenant) => ({ token: `tenant-${tenant}-token-0123456789`, tenant, scopes }));
    const guarded = await startService(backend, { API_TOKENS: JSON.stringify(tokens) });
    try {
      const [asA, asB] = tokens.map(({ token }) => new RollcallClient({ baseUrl: guarded.url, token }));
      const queue = newQueue();
      let n = 0;
      const batch = await openBatch(asA!, {
        count: 3,
        enqueue: async (ids) => void (await queue.addBulk(ids.map((id) => ({ name: 'item', data: { rollcallItemId: id, n: n++ } })))),
      });
      const wrong = new Worker<TestJobData>(
        queue.name,
        rollcallProcessor(asB!, async () => 'ok'),
        { connection, prefix },
      );
      workers.push(wrong);
      await settled(queue, 3);
      expect((await queue.getJobs(['failed'])).map((job) => job.failedReason)).toEqual(
        Array(3).fill(expect.stringMatching(/^the handler succeeded, but rollcall rejected item .*: unknown_batch$/)),
      );
      await wrong.close();

      const right = new Worker<TestJobData>(
        queue.name,
        rollcallProcessor(asA!, async () => 'ok'),
        { connection, prefix },
      );
      workers.push(right);
      let stop!: () => Promise<void>;
      await new Promise<number>((resolve) => (stop = watchFailedJobs(asA!, right, { onRecovered: resolve })));
      expect(await asA!.status(batch.id)).toMatchObject({ state: 'sealed', succeeded: 0, failed: 0, pending: 3 });
      await queue.retryJobs({ state: 'failed' });
      expect(await asA!.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', succeeded: 3, failed: 0 });
      await stop();
    } finally {
      await guarded.stop();
    }
  });

  /** A service that knows one token, a batch on a fresh queue, and a Worker's client whose token it refuses until `fix()`. */
  interface RefusedWorker {
    producer: RollcallClient;
    queue: Queue<TestJobData>;
    batch: Batch;
    /** The batch's item IDs: job n carries the nth. */
    ids: string[];
    /** Adds the jobs of the batch but the first, each on its only attempt: a put-back that counted one would fail them for good. */
    addRest(): Promise<void>;
    worker: RollcallClient;
    seen: { whoami: number; acks: number };
    warned: jest.SpiedFunction<typeof process.emitWarning>;
    /** The operator's fix: the Worker's token is taken from now on. */
    fix(): void;
    /** The proxy the Worker's client goes through, when asked for: cut it for an outage. */
    proxy: TcpProxy | null;
  }

  /**
   * Runs `body` with a batch of `count` items whose first job (3 attempts) is added at once, and a
   * Worker's client whose token the service refuses; then closes the Workers (first: a job whose
   * look-up found no service would run, and its ack wait out the outage), the proxy and the service.
   */
  async function whileWorkerRefused(count: number, body: (refused: RefusedWorker) => Promise<void>, { throughProxy = false } = {}): Promise<void> {
    const right = { token: 'the-right-token-0123456789', tenant: 'a', scopes: ['produce', 'consume', 'read'] };
    const guarded = await startService(backend, { API_TOKENS: JSON.stringify([right]) });
    const proxy = throughProxy ? new TcpProxy('127.0.0.1', Number(new URL(guarded.url).port)) : null;
    await proxy?.open();
    const warned = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const producer = new RollcallClient({ baseUrl: guarded.url, token: right.token });
      let taken = false;
      const { client: worker, seen } = swappingToken(proxy ? `http://127.0.0.1:${proxy.port}` : guarded.url, () =>
        taken ? right.token : 'a-token-the-service-does-not-know',
      );
      const queue = newQueue();
      const ids: string[] = [];
      const batch = await openBatch(producer, { count, enqueue: async (chunk) => void ids.push(...chunk) });
      await queue.add('item', { rollcallItemId: ids[0]!, n: 0 }, { attempts: 3 });
      const addRest = async () =>
        void (await queue.addBulk(ids.slice(1).map((id, i) => ({ name: 'item', data: { rollcallItemId: id, n: i + 1 }, opts: { attempts: 1 } }))));
      await body({ producer, queue, batch, ids, addRest, worker, seen, warned, fix: () => void (taken = true), proxy });
    } finally {
      warned.mockRestore();
      await Promise.all(workers.splice(0).map((w) => w.close()));
      await proxy?.cut();
      await guarded.stop();
    }
  }

  /** Resolves once a `token_refused` warning was given: a look-up's answer refused the token. */
  const refusalAnswered = (warned: RefusedWorker['warned']) =>
    until(() => warned.mock.calls.some(([warning]) => (warning as { code?: string }).code === 'token_refused'));

  /** A handler that counts its runs. */
  function counting(): { handler: () => Promise<string>; runs: () => number } {
    let runs = 0;
    return {
      handler: async () => {
        runs += 1;
        return 'ok';
      },
      runs: () => runs,
    };
  }

  it(
    "when rollcall refuses a Worker's token (401), then after the first refused ack its jobs wait and are put back unrun, and once the token is taken each runs",
    () =>
      whileWorkerRefused(21, async ({ producer, queue, batch, addRest, worker, seen, warned, fix }) => {
        const { handler, runs } = counting();
        workers.push(new Worker<TestJobData>(queue.name, rollcallProcessor(worker, handler), { connection, prefix, concurrency: 5 }));
        await refusalAnswered(warned); // its ack refused, and the token looked up
        await addRest();
        await until(() => seen.whoami >= 2, 15_000); // refused again 5 s after the first answer
        expect(runs()).toBe(1); // the first job ran and its ack was refused; no job since
        const codes = warned.mock.calls.map(([error]) => (error as { code?: string }).code);
        expect(codes.filter((code) => code === 'token_refused')).toHaveLength(1); // at most one a minute
        expect(await producer.status(batch.id)).toMatchObject({ state: 'sealed', pending: 21 });
        expect((await queue.getJobCounts('delayed')).delayed).toBeGreaterThan(0); // put back
        fix();
        expect(await producer.waitForCompletion(batch.id, { timeoutMs: 30_000 })).toMatchObject({ state: 'complete', succeeded: 21, failed: 0 });
        expect(runs()).toBe(22); // each job once, and the first once more: its refused run was retried
      }),
    60_000,
  );

  it(
    "when rollcall is out of reach at a Worker's token look-up (its token refused before, fixed in the outage), then its jobs run and their acks wait for rollcall: counts are exact",
    () =>
      whileWorkerRefused(
        11,
        async ({ producer, queue, batch, addRest, worker, seen, warned, fix, proxy }) => {
          const { handler, runs } = counting();
          workers.push(new Worker<TestJobData>(queue.name, rollcallProcessor(worker, handler), { connection, prefix, concurrency: 5 }));
          await refusalAnswered(warned);
          await addRest();
          expect({ runs: runs(), lookUps: seen.whoami }).toEqual({ runs: 1, lookUps: 1 });
          // The operator restarts rollcall with the Worker's token: away when the next look-up is made.
          await proxy!.cut();
          fix();
          // That look-up finds no rollcall, which counts as taken: the jobs run, their acks held.
          await until(() => runs() >= 6, 15_000);
          await proxy!.open();
          expect(await producer.waitForCompletion(batch.id, { timeoutMs: 30_000 })).toMatchObject({ state: 'complete', succeeded: 11, failed: 0 });
          expect(runs()).toBe(12); // each once, and the first once more: its refused run was retried
        },
        { throughProxy: true },
      ),
    60_000,
  );

  it(
    "when a job waiting for rollcall's word on a refused token is cancelled (BullMQ's abort signal), then that attempt fails at once with the reason, unrun, and BullMQ retries it",
    () =>
      whileWorkerRefused(2, async ({ queue, ids, worker, seen, warned }) => {
        const ran: number[] = [];
        const handler = async (job: Job<TestJobData>, _token?: string, _signal?: AbortSignal) => void ran.push(job.data.n);
        const running = new Worker<TestJobData>(queue.name, rollcallProcessor(worker, handler), { connection, prefix, concurrency: 5 });
        workers.push(running);
        await refusalAnswered(warned); // the first job's ack refused, its retry put back
        const waiting = await queue.add('item', { rollcallItemId: ids[1]!, n: 1 }, { attempts: 2 });
        // Once the Worker runs it (Redis says "active" a little before): it waits for the look-up, 5 s after the first.
        await until(() => running.cancelJob(waiting.id!, 'no longer wanted'));
        await until(async () => (await queue.getJob(waiting.id!))?.attemptsMade === 1, 3_000);
        expect(seen.whoami).toBe(1); // it did not wait for the next look-up
        const cancelled = await queue.getJob(waiting.id!);
        expect(cancelled?.failedReason).toBe('the job was cancelled before it ran: no longer wanted');
        expect(await cancelled?.getState()).not.toBe('failed'); // one attempt failed, as a plain error fails it: retried
        expect(ran).toEqual([0]);
      }),
    30_000,
  );

  it("when a Worker's token lacks the consume scope (403), then its jobs stay unrun as the token is asked about again", async () => {
    const tokens = [
      { token: 'the-producer-token-0123456789', tenant: 'a', scopes: ['produce', 'read'] },
      { token: 'a-read-only-token-0123456789', tenant: 'a', scopes: ['read'] },
    ];
    const guarded = await startService(backend, { API_TOKENS: JSON.stringify(tokens) });
    const warned = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const producer = new RollcallClient({ baseUrl: guarded.url, token: tokens[0]!.token });
      const { client: readOnly, seen } = swappingToken(guarded.url, () => tokens[1]!.token);
      const queue = newQueue();
      await openBatch(producer, {
        count: 5,
        enqueue: async (ids) => void (await queue.addBulk(ids.map((id, i) => ({ name: 'item', data: { rollcallItemId: id, n: i }, opts: { attempts: 3 } })))),
      });
      let runs = 0;
      const handler = async () => {
        runs += 1;
        return 'ok';
      };
      workers.push(new Worker<TestJobData>(queue.name, rollcallProcessor(readOnly, handler), { connection, prefix, concurrency: 1 }));
      await until(() => seen.whoami >= 2, 15_000);
      expect(runs).toBe(1);
      const refusals = warned.mock.calls.filter(([error]) => (error as { code?: string }).code === 'token_refused');
      expect(refusals.map(([error]) => String((error as Error).message))).toEqual([expect.stringMatching(/lacks the consume scope \(it has: read\)/)]);
    } finally {
      warned.mockRestore();
      // The Worker first: a job whose look-up found no service would run, and its ack wait out the outage.
      await Promise.all(workers.splice(0).map((w) => w.close()));
      await guarded.stop();
    }
  }, 30_000);

  it('when 450 lost failures span three pages of the look-back, each with its own reason, then all are recorded, each once', async () => {
    const queue = newQueue();
    const batch = await failedUnrecorded(queue, 450);
    const restarted = okWorker(queue);
    const { failures, stop } = await lookedBack(restarted);
    await stop();
    expect(failures).toBe(450);
    expect(await client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 1, failed: 450, pending: 0 });
    expect(tally.failedIds).toBe(450);
  });

  it('when failed jobs already read leave the failed set while the look-back pages through it, then no older failure is skipped', async () => {
    const queue = newQueue();
    const batch = await failedUnrecorded(queue, 450);
    // At the look-back's first ack, the 30 newest failures (its first page's) are removed, as a
    // retry from a dashboard would: every older one moves 30 places up.
    let removed = false;
    const removing: HttpSend = async (url, request) => {
      if (!removed && url.endsWith('/v1/acks')) {
        removed = true;
        await Promise.all((await queue.getFailed(0, 29)).map((job) => job.remove()));
      }
      return tally.fetch(url, request);
    };
    const worker = new Worker<TestJobData>(queue.name, async () => 'ok', { connection, prefix, autorun: false });
    workers.push(worker);
    let stop!: () => Promise<void>;
    const failures = await new Promise<number>(
      (resolve) => (stop = watchFailedJobs(new RollcallClient({ baseUrl: svc.url, fetch: removing }), worker, { onRecovered: resolve })),
    );
    await stop();
    expect(removed).toBe(true);
    expect(failures).toBe(450);
    expect(await client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 1, failed: 450, pending: 0 });
    expect(tally.failedIds).toBe(450); // each once: the page read again leaves out the jobs seen
  });

  it('when another process removes and retries failed jobs while the look-back reads the failed set, then every failure that stays is recorded, each once', async () => {
    const queue = newQueue();
    const batch = await failedUnrecorded(queue, 900);
    const staying = (await queue.getFailed(0, -1)).filter((job) => job.data.n % 2 === 0).map((job) => job.data.rollcallItemId);
    const racer = spawn(process.execPath, ['--import', 'tsx', 'test/integrations/fixtures/failedSetRacer.ts'], {
      cwd: ROOT,
      env: { ...process.env, REDIS_URL: redisUrl, QUEUE: queue.name, PREFIX: prefix, PACE_MS: '4' },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => racer.once('exit', resolve));
    const lines = readline.createInterface({ input: racer.stdout! });
    const printed = (start: string) =>
      new Promise<string>((resolve, reject) => {
        lines.on('line', (line) => line.startsWith(start) && resolve(line));
        void exited.then((code) => reject(new Error(`the racing process exited (${String(code)}) before printing ${start}`)));
      });
    try {
      const ready = printed('READY');
      const done = printed('DONE ');
      await ready;
      // The other process starts at the look-back's first ack, once it has read its first page, and
      // goes on through the reads of the pages after it.
      let startedAt = 0;
      const sentFailed: string[] = [];
      const collecting: HttpSend = async (url, request) => {
        const body = url.endsWith('/v1/acks') ? (JSON.parse(String(request.body)) as { ids: string[]; outcome?: string }) : null;
        if (body?.outcome === 'failed') sentFailed.push(...body.ids);
        if (body && !startedAt) {
          startedAt = Date.now();
          racer.stdin!.write('GO\n');
        }
        return tally.fetch(url, request);
      };
      const worker = new Worker<TestJobData>(queue.name, async () => 'ok', { connection, prefix, autorun: false });
      workers.push(worker);
      let stop!: () => Promise<void>;
      await new Promise<number>(
        (resolve) => (stop = watchFailedJobs(new RollcallClient({ baseUrl: svc.url, fetch: collecting }), worker, { onRecovered: resolve })),
      );
      const endedAt = Date.now();
      await stop();
      const changedAt = JSON.parse((await done).slice('DONE '.length)) as number[];
      expect(changedAt).toHaveLength(450);
      // The race took place: the other process changed the set while the look-back read it.
      expect(changedAt.filter((at) => at > startedAt && at < endedAt).length).toBeGreaterThanOrEqual(20);
      expect(new Set(sentFailed).size).toBe(sentFailed.length); // none acked twice
      const recorded = new Set<string>();
      for (let cursor: string | null | undefined; cursor !== null;) {
        const page = await client.failures(batch.id, { limit: 500, ...(cursor ? { cursor } : {}) });
        for (const failure of page.failures) recorded.add(failure.id);
        cursor = page.nextCursor;
      }
      expect(staying.filter((id) => !recorded.has(id))).toEqual([]);
      expect(await client.status(batch.id)).toMatchObject({ succeeded: 1, failed: recorded.size, pending: 900 - recorded.size });
    } finally {
      racer.kill();
      await exited;
    }
  });

  it('when four Workers start at once and all look back at the same lost failures, then each is recorded once and the batch completes once', async () => {
    const queue = newQueue();
    const batch = await failedUnrecorded(queue, 40);
    // Each watch has a client of its own, as Workers in four processes would.
    const tallies = [countingFetch(), countingFetch(), countingFetch(), countingFetch()];
    const looks = tallies.map(async (own) => {
      const worker = new Worker<TestJobData>(queue.name, async () => 'ok', { connection, prefix, autorun: false });
      workers.push(worker);
      let stop!: () => Promise<void>;
      const ownClient = new RollcallClient({ baseUrl: svc.url, fetch: own.fetch });
      const failures = await new Promise<number>((resolve) => (stop = watchFailedJobs(ownClient, worker, { onRecovered: resolve })));
      await stop();
      return failures;
    });
    expect(await Promise.all(looks)).toEqual([40, 40, 40, 40]);
    expect(await client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 1, failed: 40, pending: 0 });
    expect(tallies.reduce((sum, own) => sum + own.failedIds, 0)).toBe(160); // each watch acked all 40
    expect(tallies.reduce((sum, own) => sum + (own.completions.get(batch.id) ?? 0), 0)).toBe(1);
  });

  it('when the lost failures are older than recoverFailedWithinMs, then the watch leaves them alone', async () => {
    const queue = newQueue();
    const batch = await failedUnrecorded(queue);
    await realSleep(300);
    const restarted = okWorker(queue);
    const { failures, stop } = await lookedBack(restarted, { recoverFailedWithinMs: 250 });
    await stop();
    expect(failures).toBe(0);
    expect(tally.failedIds).toBe(0);
    expect(await client.status(batch.id)).toMatchObject({ state: 'sealed', pending: 2 });
  });

  it('when the look-back has read and recorded failed jobs with large data, then the Worker keeps none of them while it goes on running', async () => {
    const queue = new Queue<TestJobData & { pad: string }>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
    queues.push(queue);
    const pad = 'x'.repeat(200_000); // ~40 MB of job data over the 200 failed jobs, as each is read back
    const crashed = new Worker<TestJobData>(queue.name, async (job) => Promise.reject(new UnrecoverableError(`job ${job.data.n} gave up`)), {
      connection,
      prefix,
    });
    workers.push(crashed);
    let n = 0;
    const batch = await openBatch(client, {
      count: 200,
      enqueue: (ids) => queue.addBulk(ids.map((id) => ({ name: 'item', data: { rollcallItemId: id, n: n++, pad }, opts: { attempts: 1 } }))),
    });
    await settled(queue, 200, 30_000);
    await crashed.close();
    const worker = new Worker<TestJobData>(queue.name, async () => 'ok', { connection, prefix, autorun: false });
    workers.push(worker);
    const heapBefore = heapAfterCollecting();
    const { failures, stop } = await lookedBack(worker);
    try {
      expect(failures).toBe(200);
      expect(await client.status(batch.id)).toMatchObject({ state: 'complete', failed: 200, pending: 0 });
      // The watch still runs (its Worker does): the jobs it read must be garbage by now.
      await realSleep(50);
      expect(heapAfterCollecting() - heapBefore).toBeLessThan(10_000_000);
    } finally {
      await stop();
    }
  });

  it("when a watch looks back, then the queue's settings in Redis stay as they were", async () => {
    const queue = new Queue<TestJobData>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix, streams: { events: { maxLen: 50 } } });
    queues.push(queue);
    await queue.waitUntilReady();
    const redis = new IORedis(redisUrl ?? 'redis://127.0.0.1:6379');
    const meta = () => redis.hgetall(`${prefix}:${queue.name}:meta`);
    for (let tries = 0; (await meta())['opts.maxLenEvents'] !== '50'; tries++) {
      if (tries > 100) throw new Error('the queue did not write its settings');
      await realSleep(20);
    }
    const worker = okWorker(queue);
    try {
      await (await lookedBack(worker)).stop();
      expect(await meta()).toMatchObject({ 'opts.maxLenEvents': '50', version: expect.stringMatching(/^bullmq:/) });
    } finally {
      redis.disconnect();
    }
  });

  it('when Redis cannot be reached while the watch looks back, then stopping it does not wait for Redis', async () => {
    // ioredis holds a connection it was told to drop for disconnectTimeout (2 s by default): kept short, so Jest's worker exits.
    const worker = Object.assign(new EventEmitter(), {
      name: 'unreachable',
      opts: { connection: { host: '127.0.0.1', port: 1, disconnectTimeout: 50 }, prefix },
    });
    const stop = watchFailedJobs(client, worker);
    await realSleep(300); // the look-back is trying to connect
    const stopped = await Promise.race([stop().then(() => 'stopped'), realSleep(3000).then(() => 'still waiting')]);
    expect(stopped).toBe('stopped');
  });

  it('when the connection to Redis goes silent while the watch looks back, then stopping it does not wait for Redis, and the process can end', async () => {
    const queue = newQueue();
    const batch = await failedUnrecorded(queue, 450);
    const url = redisUrl ?? 'redis://127.0.0.1:6379';
    const proxy = new TcpProxy(new URL(url).hostname, redisConnection(url).port);
    await proxy.open();
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/integrations/fixtures/frozenLookBack.ts'], {
      cwd: ROOT,
      env: { ...process.env, REDIS_URL: url, PROXY_PORT: String(proxy.port), QUEUE: queue.name, PREFIX: prefix, ROLLCALL_URL: svc.url },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    const lines = readline.createInterface({ input: child.stdout! });
    const printed = (start: string) =>
      new Promise<string>((resolve, reject) => {
        lines.on('line', (line) => line.startsWith(start) && resolve(line));
        void exited.then((code) => reject(new Error(`the worker's process exited (${String(code)}) before printing ${start}`)));
      });
    const [firstAck, held, stopped] = [printed('ACK'), printed('HELD'), printed('STOPPED')];
    try {
      await firstAck;
      // The look-back has read its first page; from now on its connection is open but carries
      // nothing, either way: a network cut or a paused VM, not a refusal.
      proxy.freeze();
      child.stdin!.write('FROZEN\n');
      const acked = Number((await held).split(' ')[1]);
      const stop = await Promise.race([stopped, realSleep(5000).then(() => 'STOPPED never')]);
      const ended = await Promise.race([exited.then(() => 'ended'), realSleep(6000).then(() => 'still running 6 s later')]);
      // The stop is prompt and the look-back did not end; the process ends by itself (ioredis ends
      // the dropped socket within its disconnectTimeout, 2 s).
      expect([stop.replace(/ \d+ /, (ms) => (Number(ms) < 3000 ? ' prompt ' : ` ${ms.trim()} ms `)), ended]).toEqual(['STOPPED prompt false', 'ended']);
      expect([acked > 0, acked < 450]).toEqual([true, true]);
      expect(await client.status(batch.id)).toMatchObject({ failed: acked, pending: 450 - acked });
    } finally {
      child.kill('SIGKILL');
      await proxy.cut();
    }
  });

  it("when a flow's child fails with failParentOnFailure, then the parent's watched Worker fails the parent and its item is recorded failed", async () => {
    const parents = newQueue();
    const children = newQueue();
    const parentWorker = new Worker<TestJobData>(
      parents.name,
      rollcallProcessor(client, async () => 'parent ran'),
      { connection, prefix },
    );
    workers.push(parentWorker);
    const stop = watchFailedJobs(client, parentWorker);
    workers.push(
      new Worker(
        children.name,
        async (): Promise<string> => {
          throw new Error('child gave up');
        },
        { connection, prefix },
      ),
    );
    const flows = new FlowProducer({ connection, prefix });
    try {
      const batch = await openBatch(client, {
        count: 1,
        enqueue: async ([id]) => {
          await flows.add({
            name: 'parent',
            queueName: parents.name,
            data: { rollcallItemId: id, n: 0 },
            children: [{ name: 'child', queueName: children.name, data: {}, opts: { failParentOnFailure: true } }],
          });
        },
      });
      const done = await client.waitForCompletion(batch.id, { timeoutMs: 20_000 });
      expect(done).toMatchObject({ state: 'complete', outcome: 'failed', failed: 1, pending: 0 });
      expect(await failureReasons(batch.id)).toEqual([expect.stringMatching(/^child .+ failed$/)]);
    } finally {
      await flows.close();
      await stop();
    }
  });

  it("when the failure watch's itemIdOf throws, then the Worker's error event says failure_unrecorded and BullMQ's failure stands", async () => {
    const queue = newQueue();
    const worker = new Worker<TestJobData>(
      queue.name,
      async (): Promise<string> => {
        throw new UnrecoverableError('no retry helps');
      },
      { connection, prefix },
    );
    const errors: Array<{ code?: string }> = [];
    worker.on('error', (error) => errors.push(error as { code?: string }));
    workers.push(worker);
    const stop = watchFailedJobs(client, worker, {
      itemIdOf: () => {
        throw new Error('no item here');
      },
    });
    try {
      await produce(queue, 1, { attempts: 1 });
      await settled(queue, 1);
      await until(() => errors.length > 0);
      expect(errors.map((error) => error.code)).toEqual(['failure_unrecorded']);
      expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 0, failed: 1 });
    } finally {
      await stop();
    }
  });

  it("when jobs fail for good and the failure watch finds no item ID where it looks, then the Worker's error event says so, once", async () => {
    const queue = newQueue() as unknown as Queue<{ ref: string }>;
    // The processor (sandboxed, say, so it never acks here) reads the item ID from `ref`; the watch,
    // started without the processor's itemIdOf, looks in `rollcallItemId`.
    const worker = new Worker(
      queue.name,
      async (): Promise<string> => {
        throw new UnrecoverableError('no retry helps');
      },
      { connection, prefix },
    );
    const errors: Array<{ code?: string; message: string }> = [];
    worker.on('error', (error) => errors.push(error as { code?: string; message: string }));
    workers.push(worker);
    const stop = watchFailedJobs(client, worker);
    try {
      const batch = await openBatch(client, { count: 3, enqueue: (ids) => queue.addBulk(ids.map((ref) => ({ name: 'item', data: { ref } }))) });
      await settled(queue, 3);
      await until(() => errors.length > 0);
      await realSleep(300); // the other two failures' turn
      expect(errors.map((error) => error.code)).toEqual(['failure_unrecorded']);
      expect(errors[0]?.message).toMatch(/failed for good, and the failure watch found no rollcall item ID in it/);
      expect(await client.status(batch.id)).toMatchObject({ pending: 3 });
    } finally {
      await stop();
    }
  });

  it('when a worker is killed with SIGKILL mid-run, then its stalled jobs rerun and counts stay exact', async () => {
    const queue = newQueue();
    const batch = await produce(queue, 2000);
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/integrations/fixtures/bullmqWorker.ts'], {
      cwd: ROOT,
      env: { ...process.env, ROLLCALL_URL: svc.url, REDIS_URL: redisUrl, QUEUE: queue.name, PREFIX: prefix, WORK_MS: '10' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    let childCompletions = 0;
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      if (line === `COMPLETED ${batch.id}`) childCompletions++;
    });
    // Kill it while it holds jobs: a third of the batch has an outcome, the rest does not.
    for (;;) {
      const now = await client.status(batch.id);
      if (now.succeeded + now.failed >= 600) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    child.kill('SIGKILL');
    await exited;
    const atKill = await client.status(batch.id);
    expect(atKill.pending).toBeGreaterThan(0);
    expect(await queue.getActiveCount()).toBeGreaterThan(0); // jobs it held, now stalled

    workers.push(
      new Worker<TestJobData>(
        queue.name,
        rollcallProcessor(client, (job: Job<TestJobData>) => runTestJob(job)),
        {
          connection,
          prefix,
          concurrency: 50,
          stalledInterval: 500,
        },
      ),
    );
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 60_000 });
    await settled(queue, 2000);
    const expected = expectedOutcome(2000);
    expect(done).toMatchObject({ state: 'complete', succeeded: expected.succeeded, failed: expected.failed, pending: 0 });
    expect(childCompletions + (tally.completions.get(batch.id) ?? 0)).toBe(1);
    expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: expected.succeeded, failed: expected.failed });
  });
});

/** The heap in use after a full garbage collection (V8's `gc`, exposed for this test file). */
function heapAfterCollecting(): number {
  collectGarbage();
  return process.memoryUsage().heapUsed;
}

describeEachOrSkip(redisUrl ? serverBackends() : [])('rollcall/bullmq while another connection holds one batch (%s)', (_name, backend) => {
  const connection = redisConnection(redisUrl ?? 'redis://127.0.0.1:6379');
  const prefix = `rollcall-test-${randomBytes(4).toString('hex')}`;
  const service = serviceWithRowHolder(backend);

  it("when a worker's jobs of a held batch X share ack calls with Y's, then Y's complete meanwhile, and X's only once rollcall has taken their acks", async () => {
    const { svc, holder } = service;
    const queue = new Queue<TestJobData>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
    // Every job waits until all 25 run, so that their acks leave in the same turn: X's and Y's share calls.
    let running = 0;
    let allRunning!: () => void;
    const barrier = new Promise<void>((resolve) => (allRunning = resolve));
    const handler = async () => {
      if (++running === 25) allRunning();
      await barrier;
      return 'done';
    };
    const worker = new Worker<TestJobData>(queue.name, rollcallProcessor(svc.client, handler), { connection, prefix, concurrency: 50, autorun: false });
    try {
      const batches = [];
      for (const count of [5, 20])
        batches.push(
          await openBatch(svc.client, {
            count,
            enqueue: (ids) => queue.addBulk(ids.map((id) => ({ name: 'item', data: { rollcallItemId: id, n: 0 } }))).then(() => undefined),
          }),
        );
      const [x, y] = batches as [Batch, Batch];
      const release = await holdBatchRow(holder, x.id);
      const unlock = setTimeout(() => void release(), 15_000);
      try {
        void worker.run();
        expect(await svc.client.waitForCompletion(y.id, { timeoutMs: 8000 })).toMatchObject({ state: 'complete', succeeded: 20 });
        await until(async () => (await queue.getJobCounts('completed')).completed === 20);
        expect([(await queue.getJobCounts('completed')).completed, (await svc.client.status(x.id)).pending]).toEqual([20, 5]);
      } finally {
        clearTimeout(unlock);
        await release();
      }
      expect(await svc.client.waitForCompletion(x.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', succeeded: 5 });
      await until(async () => (await queue.getJobCounts('completed')).completed === 25);
    } finally {
      await worker.close();
      await queue.obliterate({ force: true });
      await queue.close();
    }
  }, 60_000);
});
