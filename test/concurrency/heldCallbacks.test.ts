import { RollcallClient } from '../../src/client';
import { backends, processEnv, TestDatabase } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { call, ServiceProcess, spawnService } from '../helpers/processes';
import { Delivery, Receiver } from '../helpers/receiver';

interface EventView {
  event: string;
  status: string;
  nextAttemptAt: string;
}

const bodyOf = (d: Delivery) => JSON.parse(d.body) as { event: string; batch: { id: string } };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The held-callback pass (CallbackDispatcher.parkHeld) and a delete's freeing of parked events, run
 * by separate service processes on one database, on their own timers and real clocks: the in-process
 * tests (test/api/heldCallbacks.test.ts) drive each step by hand on one clock.
 */
describe.each(backends())('held callbacks across service processes (%s)', (_name, backend) => {
  jest.setTimeout(120_000);
  let database: TestDatabase;
  let receiver: Receiver;
  const services: ServiceProcess[] = [];
  /** Each event id whose first attempt was refused. */
  const refusedOnce = new Set<string>();
  /** The event ids of these kinds are refused (500) at their first attempt. */
  let refuseFirstOf: string[] = [];

  const start = async (backoffBase: string) => {
    const env = {
      ...processEnv(database),
      CALLBACK_TIMEOUT: '1s',
      CALLBACK_BACKOFF_BASE: backoffBase,
      CALLBACK_BACKOFF_CAP: '1m',
      CALLBACK_POLL_INTERVAL: '200ms',
    };
    services.push(await spawnService(env)); // it migrates; the others find the schema current
    services.push(...(await Promise.all([1, 2].map(() => spawnService(env)))));
  };

  beforeEach(async () => {
    database = await backend.create();
    receiver = new Receiver();
    await receiver.start();
    refusedOnce.clear();
    receiver.answerFor = (delivery) => {
      const id = delivery.headers['x-rollcall-event-id'] as string;
      if (!refuseFirstOf.includes(bodyOf(delivery).event) || refusedOnce.has(id)) return 200;
      refusedOnce.add(id);
      return 500;
    };
  });

  afterEach(async () => {
    await Promise.all(services.splice(0).map((s) => s.stop()));
    await receiver.stop();
    await database?.drop();
  });

  const clientOf = (n: number) => new RollcallClient({ baseUrl: services[n % services.length]!.url });
  const eventsOf = async (n: number, batchId: string): Promise<Record<string, EventView>> => {
    const { body } = await call(`${services[n % services.length]!.url}/v1/batches/${batchId}/events`, 'GET');
    return Object.fromEntries((body.events as EventView[]).map((e) => [e.event, e]));
  };
  const deliveriesOf = (batchId: string) => receiver.deliveries.filter((d) => bodyOf(d).batch.id === batchId);
  const until = async (what: string, done: () => boolean | Promise<boolean>, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await done())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting: ${what}`);
      await sleep(50);
    }
  };

  it('when 24 batches’ first failures are refused once, then each batch.completed is parked at that retry by some process, and goes once, right after it', async () => {
    await start('16s'); // a retry 8–16 s after the refusal: past the 6-s lease, so it is parked
    refuseFirstOf = ['batch.first_failure'];
    const batches = await Promise.all(Array.from({ length: 24 }, (_, n) => batchWith(clientOf(n), 2, { callbackUrl: receiver.url })));
    await Promise.all(
      batches.map(async ({ ids }, n) => {
        await clientOf(n + 1).ack([ids[0]!], { outcome: 'failed', error: `broke ${n}` });
        await clientOf(n + 2).ack([ids[1]!]);
      }),
    );
    await until('every first_failure refused once', () => refusedOnce.size === batches.length, 15_000);

    // Operators see each batch.completed wait for its first_failure's retry (in the 5-s grain below it).
    const parkedAt = new Map<string, number>();
    await until(
      'every batch.completed parked',
      async () => {
        for (const [n, { id }] of batches.entries()) {
          if (parkedAt.has(id)) continue;
          const events = await eventsOf(n, id);
          const retryAt = Date.parse(events['batch.first_failure']!.nextAttemptAt);
          const completedAt = Date.parse(events['batch.completed']!.nextAttemptAt);
          if (events['batch.completed']!.status === 'pending' && completedAt > retryAt - 5_000 && completedAt <= retryAt) parkedAt.set(id, completedAt);
        }
        return parkedAt.size === batches.length;
      },
      7_000, // the first retries come 8 s after the refusals at the earliest
    );

    await until('every batch.completed delivered', () => batches.every(({ id }) => deliveriesOf(id).length === 3), 30_000);
    await sleep(1_000); // room for a second delivery, were there one
    for (const { id } of batches) {
      const [refused, accepted, completed, ...more] = deliveriesOf(id);
      expect([refused, accepted, completed].map((d) => [bodyOf(d!).event, d!.answered?.status])).toEqual([
        ['batch.first_failure', 500],
        ['batch.first_failure', 200],
        ['batch.completed', 200],
      ]);
      expect(more).toEqual([]);
      expect(completed!.receivedAt!).toBeGreaterThanOrEqual(accepted!.answered!.at);
      expect(completed!.receivedAt! - accepted!.answered!.at).toBeLessThan(4_000);
    }
  });

  it('when a child whose retry its parent’s batch.completed is parked behind is deleted through another process, then the parent’s goes at once', async () => {
    await start('40s'); // the child's retry 20–40 s after the refusal
    refuseFirstOf = ['batch.completed'];
    const parent = await batchWith(clientOf(0), 1, { callbackUrl: receiver.url });
    const child = await batchWith(clientOf(1), 1, { callbackUrl: receiver.url, parentItem: parent.ids[0] });
    await clientOf(2).ack(child.ids); // the child completes; its outcome completes the parent
    await until('the child’s batch.completed refused', () => refusedOnce.size === 1, 15_000);
    expect(bodyOf(receiver.deliveries[0]!).batch.id).toBe(child.id);

    let parkedUntil = 0;
    await until(
      'the parent’s batch.completed parked',
      async () => {
        const events = await eventsOf(1, parent.id);
        parkedUntil = Date.parse(events['batch.completed']?.nextAttemptAt ?? '');
        return parkedUntil > Date.now() + 10_000;
      },
      15_000,
    );
    const deletedAt = Date.now();
    expect((await call(`${services[2]!.url}/v1/batches/${child.id}`, 'DELETE')).status).toBe(204);

    await until('the parent’s batch.completed delivered', () => deliveriesOf(parent.id).length === 1, 10_000);
    const [delivered] = deliveriesOf(parent.id);
    expect(bodyOf(delivered!).event).toBe('batch.completed');
    expect(delivered!.receivedAt! - deletedAt).toBeLessThan(5_000);
    expect(delivered!.receivedAt!).toBeLessThan(parkedUntil);
  });
});
