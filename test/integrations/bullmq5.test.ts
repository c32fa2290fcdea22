import { randomBytes } from 'node:crypto';

// The oldest major of the peer range (bullmq >= 5): its Worker and Job, with rollcall/bullmq as shipped.
import { Job, Processor, Queue, UnrecoverableError, Worker } from 'bullmq5';
import IORedis from 'ioredis';

// rollcall/bullmq loads 'bullmq': here it gets bullmq 5, as in a project whose bullmq is 5 (its
// Queue reads the failed jobs at a watch's start, its UnrecoverableError is what the processor knows).
jest.mock('bullmq', () => jest.requireActual('bullmq5'));

import { Batch, RollcallClient } from '../../src/client';
import { rollcallProcessor, WatchableWorker, watchFailedJobs } from '../../src/integrations/bullmq';
import { openBatch } from '../../src/integrations/producer';
import { backends } from '../helpers/backends';
import { describeWith, redisConnection, redisUrl } from '../helpers/brokers';
import { countingFetch } from '../helpers/countingFetch';
import { startService, TestService } from '../helpers/service';

interface Data {
  rollcallItemId: string;
  n: number;
}

describeWith(redisUrl).each(backends())('rollcall/bullmq with BullMQ 5 on a real Redis and a real rollcall service (%s)', (_name, backend) => {
  const connection = redisConnection(redisUrl ?? 'redis://127.0.0.1:6379');
  const prefix = `rollcall-test5-${randomBytes(4).toString('hex')}`;
  let svc: TestService;
  const queues: Queue[] = [];
  const workers: Worker[] = [];

  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(async () => {
    await Promise.all(workers.splice(0).map((w) => w.close()));
    for (const queue of queues) {
      await queue.obliterate({ force: true });
      await queue.close();
    }
    await svc.stop();
  });

  /** The Worker with its failure watch stopped first: every failure recorded is the processor's own ack (see bullmq.test.ts). */
  function processorOnly(client: RollcallClient, worker: Worker): Worker {
    void watchFailedJobs(client, worker as unknown as WatchableWorker, { recoverFailedWithinMs: 0 })();
    return worker;
  }

  async function produce(client: RollcallClient, queue: Queue<Data>, count: number, backoff?: { type: string; delay?: number }): Promise<Batch> {
    let n = 0;
    return openBatch(client, {
      count,
      enqueue: async (ids) => {
        await queue.addBulk(ids.map((id) => ({ name: 'item', data: { rollcallItemId: id, n: n++ }, opts: { attempts: 3, backoff } })));
      },
    });
  }

  it('when jobs succeed, fail on every attempt, or discard themselves (a BullMQ 5 job that does is not retried), then exact counts', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const queue = new Queue<Data>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
    queues.push(queue);
    const batch = await produce(client, queue, 30);
    const runs = new Map<number, number>();
    workers.push(
      processorOnly(
        client,
        new Worker<Data>(
          queue.name,
          // The types are bullmq 6's here (this project's 'bullmq'); in a project on bullmq 5 they are 5's.
          rollcallProcessor(client, async (anyJob) => {
            const job = anyJob as unknown as Job<Data>;
            runs.set(job.data.n, (runs.get(job.data.n) ?? 0) + 1);
            if (job.data.n % 3 === 1) throw new Error(`job ${job.data.n} fails every time`);
            if (job.data.n % 3 === 2) {
              job.discard();
              throw new Error(`job ${job.data.n} gave up`);
            }
          }) as unknown as Processor<Data>,
          { connection, prefix, concurrency: 5 },
        ),
      ),
    );
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
    expect(done).toMatchObject({ state: 'complete', succeeded: 10, failed: 20, pending: 0 });
    expect([...runs.entries()].sort(([a], [b]) => a - b)).toEqual([...Array(30).keys()].map((n) => [n, [1, 3, 1][n % 3]]));
    const failures = (await client.failures(batch.id, { limit: 100 })).failures.map((f) => f.error);
    expect(new Set(failures)).toEqual(
      new Set([...Array(30).keys()].filter((n) => n % 3 !== 0).map((n) => (n % 3 === 1 ? `job ${n} fails every time` : `job ${n} gave up`))),
    );
  });

  it('when only the Worker has a backoff strategy that stops retries, then the processor reads it there and records each failure', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const queue = new Queue<Data>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
    queues.push(queue);
    const batch = await produce(client, queue, 4, { type: 'give-up' });
    workers.push(
      processorOnly(
        client,
        new Worker<Data>(
          queue.name,
          rollcallProcessor(client, async () => {
            throw new Error('no retry helps');
          }) as unknown as Processor<Data>,
          { connection, prefix, concurrency: 4, settings: { backoffStrategy: () => -1 } },
        ),
      ),
    );
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', failed: 4, pending: 0 });
  });

  it('when the Worker has maxStartedAttempts (which BullMQ 5 applies at the next start, not as a retry stops), then each failure is recorded once, when BullMQ 5 fails the job', async () => {
    const tally = countingFetch();
    const client = new RollcallClient({ baseUrl: svc.url, fetch: tally.fetch });
    const queue = new Queue<Data>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
    queues.push(queue);
    const batch = await produce(client, queue, 4, { type: 'fixed', delay: 200 });
    const runs = new Map<number, number>();
    workers.push(
      new Worker<Data>(
        queue.name,
        rollcallProcessor(client, async (anyJob) => {
          const job = anyJob as unknown as Job<Data>;
          runs.set(job.data.n, (runs.get(job.data.n) ?? 0) + 1);
          throw new Error(`job ${job.data.n} failed`);
        }) as unknown as Processor<Data>,
        { connection, prefix, concurrency: 4, maxStartedAttempts: 1 },
      ),
    );
    // BullMQ 5 retries each job after its run and fails it when it starts it again, without running it.
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', failed: 4, pending: 0 });
    expect(Object.fromEntries(runs)).toEqual({ 0: 1, 1: 1, 2: 1, 3: 1 });
    expect(await queue.getJobCounts('failed', 'delayed')).toEqual({ failed: 4, delayed: 0 });
    await tally.settled();
    expect(tally.failedIds).toBe(4);
    expect((await client.failures(batch.id, { limit: 10 })).failures.map((f) => f.error)).toEqual(Array(4).fill('job started more than allowable limit'));
  });

  it("when a job stalls more often than maxStalledCount, then BullMQ 5 fails it without running it and the processor's failure watch records it", async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const queue = new Queue<Data>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
    queues.push(queue);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const worker = new Worker<Data>(
      queue.name,
      rollcallProcessor(client, async (anyJob) => {
        // Job 1 holds its slot past its lock, which is not renewed: it stalls.
        if ((anyJob as unknown as Job<Data>).data.n === 1) await held;
      }) as unknown as Processor<Data>,
      { connection, prefix, concurrency: 3, lockDuration: 1000, skipLockRenewal: true, stalledInterval: 500, maxStalledCount: 0 },
    );
    worker.on('error', () => undefined); // the held run's completion, after BullMQ failed its job
    workers.push(worker);
    try {
      const batch = await produce(client, queue, 3);
      expect(await client.waitForCompletion(batch.id, { timeoutMs: 20_000 })).toMatchObject({ state: 'complete', succeeded: 2, failed: 1, pending: 0 });
      expect((await client.failures(batch.id, { limit: 10 })).failures.map((f) => f.error)).toEqual(['job stalled more than allowable limit']);
    } finally {
      release();
    }
  });

  it('when a run loses its lock and its job runs again, then its UnrecoverableError is not recorded: the rerun that succeeds decides the batch', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const queue = new Queue<Data>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
    queues.push(queue);
    // As in bullmq.test.ts: run 1 outlives its lock (not renewed), the stall check puts the job back,
    // run 2 starts; run 1 then throws, and run 2 succeeds once run 1's processor has settled.
    let runs = 0;
    let secondStarted!: () => void;
    const second = new Promise<void>((resolve) => (secondStarted = resolve));
    let firstSettled: Promise<unknown> | undefined;
    const processor = rollcallProcessor(client, async () => {
      if (++runs === 1) {
        await second;
        throw new UnrecoverableError('run 1 gave up after losing its lock');
      }
      secondStarted();
      await firstSettled;
    }) as unknown as Processor<Data>;
    const worker = new Worker<Data>(
      queue.name,
      (job, token) => {
        const run = processor(job, token);
        firstSettled ??= run.catch(() => undefined);
        return run;
      },
      { connection, prefix, concurrency: 2, lockDuration: 2000, skipLockRenewal: true, stalledInterval: 500, maxStalledCount: 1 },
    );
    worker.on('error', () => undefined); // run 1's failure, which BullMQ 5 cannot move without the lock
    workers.push(worker);
    const batch = await produce(client, queue, 1);
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 20_000 })).toMatchObject({ state: 'complete', outcome: 'succeeded', failed: 0 });
    expect(runs).toBe(2);
  });

  /** Jobs 0 … failing-1 of a new batch failed for good by a BullMQ 5 Worker that records nothing (as when a crash cut the watch's ack off); the last one acked succeeded. */
  async function failedUnrecorded(client: RollcallClient, queue: Queue<Data>, failing: number): Promise<Batch> {
    const crashed = new Worker<Data>(
      queue.name,
      async (job) => {
        if (job.data.n < failing) throw new UnrecoverableError(`job ${job.data.n} gave up`);
        await client.ack([job.data.rollcallItemId]);
      },
      { connection, prefix },
    );
    workers.push(crashed);
    const batch = await produce(client, queue, failing + 1);
    for (let tries = 0; (await queue.getJobCounts('failed')).failed !== failing; tries++) {
      if (tries > 200) throw new Error('BullMQ 5 did not fail the jobs');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await crashed.close();
    expect(await client.status(batch.id)).toMatchObject({ state: 'sealed', succeeded: 1, pending: failing });
    return batch;
  }

  it("when a BullMQ 5 Worker failed 250 jobs for good and their acks were lost, then the watch started with the next Worker records them, and leaves the queue's settings in Redis alone", async () => {
    const tally = countingFetch();
    const client = new RollcallClient({ baseUrl: svc.url, fetch: tally.fetch });
    const queue = new Queue<Data>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix, streams: { events: { maxLen: 50 } } });
    queues.push(queue);
    const batch = await failedUnrecorded(client, queue, 250);
    const redis = new IORedis(redisUrl ?? 'redis://127.0.0.1:6379');
    try {
      const metaOf = () => redis.hgetall(`${prefix}:${queue.name}:meta`);
      let meta = await metaOf();
      for (let tries = 0; meta['opts.maxLenEvents'] !== '50'; tries++, meta = await metaOf()) {
        if (tries > 100) throw new Error('the queue did not write its settings');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const restarted = new Worker<Data>(queue.name, async () => undefined, { connection, prefix, autorun: false });
      workers.push(restarted);
      let stop!: () => Promise<void>;
      const failures = await new Promise<number>(
        (resolve) => (stop = watchFailedJobs(client, restarted as unknown as WatchableWorker, { onRecovered: resolve })),
      );
      await stop();
      expect(failures).toBe(250); // over two pages
      expect(await client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 1, failed: 250, pending: 0 });
      expect(tally.failedIds).toBe(250);
      expect(await metaOf()).toEqual(meta);
    } finally {
      redis.disconnect();
    }
  });

  it("when the watch of a Worker made on the user's own Redis client is stopped during its look-back, then that client stays connected", async () => {
    // BullMQ 5's Queue.disconnect() would end a client it was given: the watch must not call it there.
    // (`as never`: bullmq5 types its own copy of ioredis; BullMQ takes any client by its methods.)
    const own = new IORedis(redisUrl ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: null });
    const queue = new Queue<Data>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
    queues.push(queue);
    const worker = new Worker<Data>(queue.name, async () => undefined, { connection: own as never, prefix, autorun: false });
    try {
      const stop = watchFailedJobs(new RollcallClient({ baseUrl: svc.url }), worker as unknown as WatchableWorker);
      await stop(); // the look-back has just begun its first read: the stop ends it
      await new Promise((resolve) => setTimeout(resolve, 300)); // what the stop leaves to the background is done
      expect([own.status, await own.ping()]).toEqual(['ready', 'PONG']);
    } finally {
      await worker.close();
      own.disconnect();
    }
  });
});
