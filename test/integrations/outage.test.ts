/**
 * A rollcall outage longer than a restart, under both integrations with their default options: the
 * workers wait for rollcall (the acks are sent again for up to `retryForMs`, 10 minutes by default),
 * and no work that was done fails or runs again. Once, on the embedded service: what is tested is
 * the client side, whatever database the service has.
 */
import { randomBytes } from 'node:crypto';

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

  describeWith(redisUrl)('BullMQ', () => {
    it('when rollcall is away for 35 s, then jobs on their only attempt wait for it: each runs once, none fails', async () => {
      const connection = redisConnection(redisUrl ?? 'redis://127.0.0.1:6379');
      const prefix = `rollcall-test-${randomBytes(4).toString('hex')}`;
      const queue = new Queue(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
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
      const connection = await amqp.connect(amqpUrl ?? 'amqp://guest:guest@127.0.0.1:5672');
      const channel = await connection.createChannel();
      const queue = `rollcall-test-${randomBytes(4).toString('hex')}`;
      await channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': 6 } });
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
});
