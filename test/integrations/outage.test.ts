/**
 * A rollcall outage longer than a restart, under both integrations with their default options: the
 * workers wait for rollcall (the acks are sent again for up to `retryForMs`, 10 minutes by default),
 * and no work that was done fails or runs again. Once, on the embedded service: what is tested is
 * the client side, whatever database the service has.
 */
import { ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net, { AddressInfo } from 'node:net';
import path from 'node:path';
import readline from 'node:readline';

import amqp from 'amqplib';
import { Queue, Worker } from 'bullmq';

import { RollcallClient } from '../../src/client';
import { rollcallConsumer } from '../../src/integrations/amqp';
import { rollcallProcessor } from '../../src/integrations/bullmq';
import { openBatch } from '../../src/integrations/producer';
import { backends } from '../helpers/backends';
import { amqpUrl, describeWith, redisConnection, redisUrl } from '../helpers/brokers';
import { realSleep, until } from '../helpers/realTime';
import { startService, TestService } from '../helpers/service';
import { TcpProxy } from '../helpers/tcpProxy';

/** Longer than the ~29 s the acks were sent again for before: a restart that took its time, a failover. */
const OUTAGE_MS = 35_000;
const COUNT = 40;

describe('a rollcall outage of 35 s (longer than the old ~29 s of tries) under workers with default options', () => {
  let svc: TestService;
  let proxy: TcpProxy;
  /** The workers' client: it reaches rollcall through the proxy, which the test cuts. */
  let throughProxy: RollcallClient;

  beforeAll(async () => {
    svc = await startService(backends()[0]![1]);
    proxy = new TcpProxy('127.0.0.1', Number(new URL(svc.url).port));
    await proxy.open();
    throughProxy = new RollcallClient({ baseUrl: `http://127.0.0.1:${proxy.port}` });
  });
  afterAll(async () => {
    await proxy.cut();
    await svc.stop();
  });

  /**
   * Cuts rollcall off once `started` says the work is under way, for OUTAGE_MS, then lets it back;
   * expects the batch to have been left open meanwhile (its acks were held, not given up).
   */
  async function outageOnce(batchId: string, started: () => boolean): Promise<void> {
    await until(started, 20_000);
    await proxy.cut(); // connections dropped, new ones refused
    await realSleep(OUTAGE_MS);
    expect(await svc.client.status(batchId)).toMatchObject({ state: 'sealed', failed: 0 }); // the service itself, not through the proxy
    await proxy.open();
  }

  /** A BullMQ queue under a prefix of its own, on the tests' Redis. */
  function newBullmqQueue(): { connection: ReturnType<typeof redisConnection>; prefix: string; queue: Queue } {
    const connection = redisConnection(redisUrl ?? 'redis://127.0.0.1:6379');
    const prefix = `rollcall-test-${randomBytes(4).toString('hex')}`;
    return { connection, prefix, queue: new Queue(`q-${randomBytes(4).toString('hex')}`, { connection, prefix }) };
  }

  /** A connection, a channel and a quorum queue of their own (with a delivery limit of 6), on the tests' RabbitMQ. */
  async function newAmqpQueue(): Promise<{ url: string; connection: amqp.ChannelModel; channel: amqp.Channel; queue: string }> {
    const url = amqpUrl ?? 'amqp://guest:guest@127.0.0.1:5672';
    const connection = await amqp.connect(url);
    const channel = await connection.createChannel();
    const queue = `rollcall-test-${randomBytes(4).toString('hex')}`;
    await channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': 6 } });
    return { url, connection, channel, queue };
  }

  describeWith(redisUrl)('BullMQ', () => {
    it('when rollcall is away for 35 s, then jobs on their only attempt wait for it: each runs once, none fails', async () => {
      const { connection, prefix, queue } = newBullmqQueue();
      const batch = await openBatch(svc.client, {
        count: COUNT,
        enqueue: async (ids) => void (await queue.addBulk(ids.map((id) => ({ name: 'item', data: { rollcallItemId: id }, opts: { attempts: 1 } })))),
      });
      const runs = new Map<string, number>();
      const worker = new Worker(
        queue.name,
        rollcallProcessor(throughProxy, async (job) => {
          runs.set(job.id!, (runs.get(job.id!) ?? 0) + 1);
          await realSleep(200); // the outage begins with jobs still running
          return 'done';
        }),
        { connection, prefix, concurrency: 10 },
      );
      try {
        await outageOnce(batch.id, () => runs.size >= 5);
        expect(await svc.client.waitForCompletion(batch.id, { timeoutMs: 20_000 })).toMatchObject({ state: 'complete', succeeded: COUNT, failed: 0 });
        await until(async () => (await queue.getJobCounts('completed')).completed === COUNT, 10_000);
        expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: COUNT, failed: 0 });
        expect([...runs.values()].every((n) => n === 1)).toBe(true);
        expect(runs.size).toBe(COUNT);
      } finally {
        await worker.close();
        await queue.obliterate({ force: true });
        await queue.close();
      }
    }, 120_000);
  });

  describeWith(amqpUrl)('RabbitMQ', () => {
    it('when rollcall is away for 35 s, then the messages it holds wait for it: each runs once, none goes back to the queue', async () => {
      const { connection, channel, queue } = await newAmqpQueue();
      const batch = await openBatch(svc.client, {
        count: COUNT,
        enqueue: async (ids) => {
          for (const id of ids) channel.sendToQueue(queue, Buffer.from(id), { persistent: true, headers: { 'x-rollcall-item-id': id } });
        },
      });
      const runs = new Map<string, number>();
      const returned: string[] = [];
      const settling = {
        ack: (m: amqp.ConsumeMessage) => channel.ack(m),
        nack: (m: amqp.ConsumeMessage, allUpTo?: boolean, requeue?: boolean) => {
          returned.push(m.content.toString());
          channel.nack(m, allUpTo, requeue);
        },
        reject: (m: amqp.ConsumeMessage, requeue?: boolean) => {
          returned.push(m.content.toString());
          channel.reject(m, requeue);
        },
      };
      await channel.prefetch(10);
      const consume = rollcallConsumer(throughProxy, settling, async (message) => {
        runs.set(message.content.toString(), (runs.get(message.content.toString()) ?? 0) + 1);
        await realSleep(200);
      });
      const { consumerTag } = await channel.consume(queue, consume);
      try {
        await outageOnce(batch.id, () => runs.size >= 5);
        expect(await svc.client.waitForCompletion(batch.id, { timeoutMs: 20_000 })).toMatchObject({ state: 'complete', succeeded: COUNT, failed: 0 });
        await channel.cancel(consumerTag);
        await consume.drain();
        expect(returned).toEqual([]);
        expect([...runs.values()].every((n) => n === 1)).toBe(true);
        expect(runs.size).toBe(COUNT);
        expect((await channel.checkQueue(queue)).messageCount).toBe(0);
      } finally {
        await channel.deleteQueue(queue);
        await connection.close();
      }
    }, 120_000);
  });

  describe('a worker stopped while its acks are held', () => {
    /** A server that resets every connection at once: an ack call sent there fails (ECONNRESET), and is sent again. */
    const resetting = net.createServer((socket) => socket.resetAndDestroy());
    let unreachable = '';
    beforeAll(async () => {
      await new Promise<void>((resolve) => resetting.listen(0, '127.0.0.1', resolve));
      unreachable = `http://127.0.0.1:${(resetting.address() as AddressInfo).port}`;
    });
    afterAll(() => new Promise((resolve) => resetting.close(resolve)));

    interface Fixture {
      child: ChildProcess;
      /** What it has printed, line by line. */
      output: string[];
      ended: Promise<{ at: number; code: number | null; signal: NodeJS.Signals | null }>;
    }

    /** A fixture of test/integrations/fixtures/ in a process of its own. */
    function spawnFixture(file: string, env: Record<string, string>): Fixture {
      const child = spawn(process.execPath, ['--import', 'tsx', `test/integrations/fixtures/${file}`], {
        cwd: path.resolve(__dirname, '../..'),
        env: { ...process.env, ...env },
        stdio: ['ignore', 'pipe', 'ignore'],
      });
      const output: string[] = [];
      readline.createInterface({ input: child.stdout! }).on('line', (line) => output.push(line));
      return { child, output, ended: new Promise((resolve) => child.once('exit', (code, signal) => resolve({ at: Date.now(), code, signal }))) };
    }

    /** How the process ended, and how long after `since`; null if it is still running `limitMs` after it. */
    async function endingWithin(fixture: Fixture, since: number, limitMs: number) {
      return Promise.race([fixture.ended.then(({ at, code, signal }) => ({ afterMs: at - since, code, signal })), realSleep(limitMs).then(() => null)]);
    }

    /**
     * Runs test/integrations/fixtures/drainingProcess.ts against rollcall behind the proxy, cut: once
     * it says WAITING, expects it still running 3 s later, and once rollcall is back, `printed` after
     * WAITING, and its own end.
     */
    async function staysThroughOutage(env: Record<string, string>, printed: string[]): Promise<void> {
      await proxy.cut();
      let cut = true;
      const fixture = spawnFixture('drainingProcess.ts', { ROLLCALL_URL: `http://127.0.0.1:${proxy.port}`, ...env });
      try {
        await until(() => fixture.output.includes('WAITING'), 30_000);
        await realSleep(3000); // its ack refused and sent again, its pauses holding nothing
        expect({ running: fixture.child.exitCode === null, output: fixture.output }).toEqual({ running: true, output: ['WAITING'] });
        await proxy.open();
        cut = false;
        expect(await endingWithin(fixture, Date.now(), 15_000)).toMatchObject({ code: 0, signal: null });
        expect(fixture.output).toEqual(['WAITING', ...printed]);
      } finally {
        fixture.child.kill('SIGKILL');
        if (cut) await proxy.open();
      }
    }

    it('when a process waits for its held acks with nothing else to do (a graceful stop after its connections closed), then it stays until rollcall answers them', async () => {
      let item = '';
      const batch = await openBatch(svc.client, { count: 1, enqueue: async ([id]) => void (item = id!) });
      await staysThroughOutage({ ITEM: item }, ['ACKED null', 'DRAINED']);
      expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 1 });
    }, 60_000);

    describeWith(redisUrl)('BullMQ', () => {
      it('when a watched job fails for good while rollcall is away and its Worker is closed, the process left to end, then it stays until the failure is recorded', async () => {
        const { prefix, queue } = newBullmqQueue();
        const batch = await openBatch(svc.client, {
          count: 1,
          enqueue: async ([id]) => void (await queue.add('item', { rollcallItemId: id }, { attempts: 1 })),
        });
        try {
          // BullMQ will not run the job again: the watch's ack is all that records its failure.
          await staysThroughOutage({ MODE: 'watch', REDIS_URL: redisUrl ?? '', QUEUE: queue.name, PREFIX: prefix }, []);
          expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', failed: 1 });
        } finally {
          await queue.obliterate({ force: true });
          await queue.close();
        }
      }, 60_000);

      it('when a worker is force-closed while rollcall is away, then its process ends; its jobs run again in another worker, counted once', async () => {
        const { connection, prefix, queue } = newBullmqQueue();
        let n = 3; // jobs of kind "ok" (fixtures/jobs.ts)
        const batch = await openBatch(svc.client, {
          count: 5,
          enqueue: async (ids) => void (await queue.addBulk(ids.map((id) => ({ name: 'item', data: { rollcallItemId: id, n: n++ }, opts: { attempts: 1 } })))),
        });
        const worker0 = spawnFixture('bullmqWorker.ts', { ROLLCALL_URL: unreachable, REDIS_URL: redisUrl ?? '', QUEUE: queue.name, PREFIX: prefix });
        try {
          await until(() => worker0.output.includes('READY'), 30_000);
          await until(async () => (await queue.getActiveCount()) === 5, 30_000);
          await realSleep(500); // the handlers are done, their acks refused and held
          const stoppedAt = Date.now();
          worker0.child.kill('SIGUSR2'); // worker.close(true), and nothing else
          // Before, the held acks' retries kept the process alive for retryForMs (10 minutes).
          expect(await endingWithin(worker0, stoppedAt, 15_000)).toMatchObject({ code: 0, signal: null });
          const runs: string[] = [];
          const worker = new Worker(
            queue.name,
            rollcallProcessor(svc.client, async (job) => void runs.push(job.id!)),
            { connection, prefix, stalledInterval: 500 },
          );
          try {
            // The stopped worker's jobs stall (their locks were not renewed) and run here.
            expect(await svc.client.waitForCompletion(batch.id, { timeoutMs: 30_000 })).toMatchObject({ state: 'complete', succeeded: 5, failed: 0 });
            expect(runs.sort()).toEqual((await queue.getJobs(['completed', 'active'])).map((job) => job.id).sort());
          } finally {
            await worker.close();
          }
        } finally {
          worker0.child.kill('SIGKILL');
          await queue.obliterate({ force: true });
          await queue.close();
        }
      }, 90_000);
    });

    describeWith(amqpUrl)('RabbitMQ', () => {
      it('when a consumer closes its connection and then waits with drain() while rollcall is away, then its process stays until rollcall answers the held ack', async () => {
        const { url, connection, channel, queue } = await newAmqpQueue();
        const batch = await openBatch(svc.client, {
          count: 1,
          enqueue: async ([id]) => void channel.sendToQueue(queue, Buffer.from('{}'), { persistent: true, headers: { 'x-rollcall-item-id': id } }),
        });
        try {
          await staysThroughOutage({ MODE: 'consumer', AMQP_URL: url, QUEUE: queue }, ['DRAINED']);
          expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 1 });
        } finally {
          await channel.deleteQueue(queue);
          await connection.close();
        }
      }, 60_000);

      it('when a consumer closes its connection while rollcall is away, then its process ends; its messages run again in another consumer, counted once', async () => {
        const { url, connection, channel, queue } = await newAmqpQueue();
        let n = 3; // messages of kind "ok" (fixtures/messages.ts)
        const batch = await openBatch(svc.client, {
          count: 5,
          enqueue: async (ids) => {
            for (const id of ids)
              channel.sendToQueue(queue, Buffer.from(JSON.stringify({ n: n++ })), { persistent: true, headers: { 'x-rollcall-item-id': id } });
          },
        });
        const consumer0 = spawnFixture('amqpConsumer.ts', { ROLLCALL_URL: unreachable, AMQP_URL: url, QUEUE: queue });
        try {
          await until(() => consumer0.output.includes('READY'), 30_000);
          await until(async () => (await channel.checkQueue(queue)).messageCount === 0, 30_000); // all five delivered to it
          await realSleep(500); // the handlers are done, their acks refused and held
          const stoppedAt = Date.now();
          consumer0.child.kill('SIGUSR2'); // connection.close(), and nothing else
          expect(await endingWithin(consumer0, stoppedAt, 15_000)).toMatchObject({ code: 0, signal: null });
          const runs: number[] = [];
          await channel.prefetch(10);
          const consume = rollcallConsumer(svc.client, channel, async (message) => void runs.push(JSON.parse(message.content.toString()).n));
          const { consumerTag } = await channel.consume(queue, consume);
          expect(await svc.client.waitForCompletion(batch.id, { timeoutMs: 30_000 })).toMatchObject({ state: 'complete', succeeded: 5, failed: 0 });
          await channel.cancel(consumerTag);
          await consume.drain();
          expect(runs.sort()).toEqual([3, 4, 5, 6, 7]);
        } finally {
          consumer0.child.kill('SIGKILL');
          await channel.deleteQueue(queue);
          await connection.close();
        }
      }, 90_000);
    });
  });
});
