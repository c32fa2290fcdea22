import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import path from 'node:path';
import readline from 'node:readline';
import v8 from 'node:v8';
import vm from 'node:vm';

import amqp, { Channel, ChannelModel, ConsumeMessage } from 'amqplib';

import { Batch, HttpSend, httpSend, RollcallClient } from '../../src/client';
import { AckingChannel, handedToChild, ITEM_ID_HEADER, RollcallConsumeCallback, rollcallConsumer, RollcallConsumerOptions } from '../../src/integrations/amqp';
import { openBatch } from '../../src/integrations/producer';
import { backends } from '../helpers/backends';
import { amqpUrl, describeWith } from '../helpers/brokers';
import { AckTally, countingFetch, swappingToken } from '../helpers/countingFetch';
import { realSleep, until } from '../helpers/realTime';
import { startService, TestService } from '../helpers/service';
import { TcpProxy } from '../helpers/tcpProxy';
import { kindOf } from './fixtures/jobs';
import { handleTestMessage, numberOf } from './fixtures/messages';

/** A consumer's channel, its tag and its callback (whose `drain` waits for the messages it took). */
interface Consuming {
  channel: Channel;
  consumerTag: string;
  callback: RollcallConsumeCallback;
}

function expected(count: number): { succeeded: number; failed: number } {
  let failed = 0;
  for (let n = 0; n < count; n++) if (kindOf(n) === 'permanent' || kindOf(n) === 'unrecoverable') failed++;
  return { succeeded: count - failed, failed };
}

describeWith(amqpUrl).each(backends())('rollcall/amqp on a real RabbitMQ quorum queue and a real rollcall service (%s)', (_name, backend) => {
  const url = new URL(amqpUrl ?? 'amqp://guest:guest@127.0.0.1:5672');
  let svc: TestService;
  const connections: ChannelModel[] = [];
  let admin: ChannelModel;

  beforeAll(async () => {
    svc = await startService(backend);
    admin = await amqp.connect(url.toString());
  });
  afterAll(async () => {
    for (const c of connections) await c.close().catch(() => undefined);
    await admin.close();
    await svc.stop();
  });

  async function connect(through?: TcpProxy): Promise<ChannelModel> {
    const target = new URL(url.toString());
    if (through) target.port = String(through.port);
    const connection = await amqp.connect(target.toString());
    connection.on('error', () => undefined); // a dropped connection is what some tests do
    connections.push(connection);
    return connection;
  }

  /** A fresh quorum queue and a batch of `count` items published to it through rollcall/producer. */
  async function produce(client: RollcallClient, count: number, queueArguments: Record<string, unknown> = {}): Promise<{ queue: string; batch: Batch }> {
    const queue = `rollcall-test-${randomBytes(4).toString('hex')}`;
    const channel = await admin.createConfirmChannel();
    await channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum', ...queueArguments } });
    let n = 0;
    const batch = await openBatch(client, {
      count,
      enqueue: async (ids) => {
        for (const id of ids) channel.sendToQueue(queue, Buffer.from(JSON.stringify({ n: n++ })), { headers: { 'x-rollcall-item-id': id }, persistent: true });
        await channel.waitForConfirms();
      },
    });
    await channel.close();
    return { queue, batch };
  }

  async function consumer(
    connection: ChannelModel,
    queue: string,
    client: RollcallClient,
    runs: Map<number, number>,
    workMs: number,
    options: RollcallConsumerOptions = {},
  ): Promise<Consuming> {
    const channel = await connection.createChannel();
    channel.on('error', () => undefined);
    await channel.prefetch(20);
    const callback = rollcallConsumer(
      client,
      channel,
      (message) => {
        runs.set(numberOf(message), (runs.get(numberOf(message)) ?? 0) + 1);
        return handleTestMessage(message, workMs);
      },
      options,
    );
    const { consumerTag } = await channel.consume(queue, callback);
    return { channel, consumerTag, callback };
  }

  /** Waits until the queue holds no ready message (then a little more for unacked ones), and deletes it. */
  async function drained(queue: string): Promise<void> {
    const channel = await admin.createChannel();
    await until(async () => (await channel.checkQueue(queue)).messageCount === 0, 10_000);
    // messageCount counts ready messages only: wait a little more for unacked ones to settle.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await channel.deleteQueue(queue);
    await channel.close();
  }

  /**
   * Whether every message the consumer took was settled: once it has taken them all, it is stopped
   * as the docs say (cancel, then `drain`: the last deliveries, maybe still on the wire when the
   * queue showed none ready, reach it before the cancel's answer), and its channel is closed, which
   * returns any unacknowledged message to the queue as ready, where checkQueue counts it.
   */
  async function expectNoneUnsettled(queue: string, { channel, consumerTag, callback }: Consuming): Promise<void> {
    const check = await admin.createChannel();
    await until(async () => (await check.checkQueue(queue)).messageCount === 0, 10_000);
    await channel.cancel(consumerTag);
    await callback.drain();
    await channel.close();
    await new Promise((resolve) => setTimeout(resolve, 300)); // a returned message is counted once RabbitMQ has requeued it
    expect((await check.checkQueue(queue)).messageCount).toBe(0);
    await check.close();
  }

  it('when messages fail for good or only at first, then each runs as often as maxDeliveries allows', async () => {
    const tally = countingFetch();
    const client = new RollcallClient({ baseUrl: svc.url, fetch: tally.fetch });
    const { queue, batch } = await produce(client, 200);
    const runs = new Map<number, number>();
    await consumer(await connect(), queue, client, runs, 0);
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
    expect(done).toMatchObject({ state: 'complete', ...expected(200), pending: 0 });
    for (let n = 0; n < 200; n++) expect([n, runs.get(n)]).toEqual([n, { permanent: 4, unrecoverable: 4, flaky: 2, ok: 1 }[kindOf(n)]]);
    await tally.settled(); // the answer that completed the batch may still be on its way to the consumer
    await drained(queue);
    expect(tally.completions.get(batch.id)).toBe(1);
  });

  it("when maxDeliveries is the queue's own x-delivery-limit, then each failure is recorded on the last delivery RabbitMQ makes", async () => {
    const tally = countingFetch();
    const client = new RollcallClient({ baseUrl: svc.url, fetch: tally.fetch });
    const { queue, batch } = await produce(client, 60, { 'x-delivery-limit': 1 });
    const runs = new Map<number, number>();
    await consumer(await connect(), queue, client, runs, 0, { maxDeliveries: 1 });
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
    expect(done).toMatchObject({ state: 'complete', ...expected(60), pending: 0 });
    for (let n = 0; n < 60; n++) expect([n, runs.get(n)]).toEqual([n, { permanent: 2, unrecoverable: 2, flaky: 2, ok: 1 }[kindOf(n)]]);
    await tally.settled();
    await drained(queue);
    expect(tally.completions.get(batch.id)).toBe(1);
  });

  it('when a consumer is cancelled, drained and then closed, then the messages it held finish once and none goes back to the queue', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(client, 30);
    const channel = await (await connect()).createChannel();
    await channel.prefetch(30);
    let started = 0;
    let allStarted!: () => void;
    const running = new Promise<void>((resolve) => (allStarted = resolve));
    const consume = rollcallConsumer(client, channel, async () => {
      if (++started === 30) allStarted();
      await new Promise((wait) => setTimeout(wait, 300));
    });
    const { consumerTag } = await channel.consume(queue, consume);
    await running;
    await channel.cancel(consumerTag);
    await consume.drain();
    await channel.close();
    expect(await client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 30, pending: 0 });
    const check = await admin.createChannel();
    expect((await check.checkQueue(queue)).messageCount).toBe(0);
    await check.deleteQueue(queue);
    await check.close();
    expect(started).toBe(30);
  });

  it('when the channel has ack and nack only (as a connection manager wraps one), then failures still go back and count', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(client, 60);
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    await channel.prefetch(20);
    const runs = new Map<number, number>();
    const wrapper = {
      ack: (m: ConsumeMessage) => channel.ack(m),
      nack: (m: ConsumeMessage, allUpTo?: boolean, requeue?: boolean) => channel.nack(m, allUpTo, requeue),
    };
    await channel.consume(
      queue,
      rollcallConsumer(client, wrapper, (message) => {
        runs.set(numberOf(message), (runs.get(numberOf(message)) ?? 0) + 1);
        return handleTestMessage(message, 0);
      }),
    );
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 30_000 });
    expect(done).toMatchObject({ state: 'complete', ...expected(60), pending: 0 });
    for (let n = 0; n < 60; n++) expect([n, runs.get(n)]).toEqual([n, { permanent: 4, unrecoverable: 4, flaky: 2, ok: 1 }[kindOf(n)]]);
    await drained(queue);
  });

  it('when rollcall refuses the ack call itself (a 4xx: a wrong baseUrl), then the message goes back as a failed delivery, so the delivery limit ends its reruns', async () => {
    const { queue, batch } = await produce(new RollcallClient({ baseUrl: svc.url }), 1, { 'x-delivery-limit': 2 });
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    const returns: string[] = [];
    const errors: string[] = [];
    let runs = 0;
    const recording = {
      ack: (m: ConsumeMessage) => channel.ack(m),
      nack: (m: ConsumeMessage, allUpTo?: boolean, requeue?: boolean) => {
        returns.push('nack');
        channel.nack(m, allUpTo, requeue);
      },
      reject: (m: ConsumeMessage, requeue?: boolean) => {
        returns.push('reject');
        channel.reject(m, requeue);
      },
    };
    const misrouted = new RollcallClient({ baseUrl: `${svc.url}/misrouted` });
    await channel.consume(
      queue,
      rollcallConsumer(misrouted, recording, () => void runs++, { onError: (error) => errors.push(error.message) }),
    );
    await until(() => returns.length >= 3, 10_000); // the third return is the last: RabbitMQ then drops the message
    await drained(queue);
    // Delivered 3 times (x-delivery-limit 2), each run's ack refused, each return counted: basic.reject,
    // which every RabbitMQ counts (from 4.3 on a basic.nack is not counted: it would rerun forever).
    expect({ runs, returns }).toEqual({ runs: 3, returns: ['reject', 'reject', 'reject'] });
    expect(errors).toHaveLength(3);
    expect(errors[0]).toMatch(/no route/);
    expect(await svc.client.status(batch.id)).toMatchObject({ pending: 1 });
  });

  const WRONG_TOKEN = 'a-token-the-service-does-not-know';

  /** What a consumer's channel did with each message, by its number, in order. */
  interface Settle {
    how: 'ack' | 'nack' | 'reject';
    n: number;
    requeue?: boolean;
  }

  /** Settles through amqplib's `channel`, noting each settle, and passes the channel's close on. */
  function noting(channel: Channel): { acking: AckingChannel; settles: Settle[]; numbersOf(how: Settle['how']): number[] } {
    const settles: Settle[] = [];
    const acking: AckingChannel = {
      ack: (m) => {
        settles.push({ how: 'ack', n: numberOf(m) });
        channel.ack(m);
      },
      nack: (m, allUpTo, requeue) => {
        settles.push({ how: 'nack', n: numberOf(m), requeue });
        channel.nack(m, allUpTo, requeue);
      },
      reject: (m, requeue) => {
        settles.push({ how: 'reject', n: numberOf(m), requeue });
        channel.reject(m, requeue);
      },
      once: (event, listener) => channel.once(event, listener),
    };
    return { acking, settles, numbersOf: (how) => settles.filter((settle) => settle.how === how).map((settle) => settle.n) };
  }

  /** A test's service that knows only one token, its batch on a fresh quorum queue, and a consumer's client whose token it refuses until `fix()`. */
  interface RefusedToken {
    guarded: TestService;
    producer: RollcallClient;
    queue: string;
    batch: Batch;
    /** The batch's item IDs; message n carries the nth. */
    ids: string[];
    /** Publishes message `n` carrying `itemId`. */
    send(n: number, itemId: string): Promise<void>;
    /** Publishes the batch's messages not published at first. */
    publishRest(): Promise<void>;
    client: RollcallClient;
    seen: { whoami: number; acks: number };
    warned: jest.SpiedFunction<typeof process.emitWarning>;
    /** The operator's fix: the client's token is taken from now on. */
    fix(): void;
    /** The operator's mistake: the client's token is refused from now on. */
    refuse(): void;
  }

  /**
   * Runs `body` with a batch of `count` items whose first `publishedFirst` messages are published at
   * once, and a client whose token the service refuses; the service is stopped and the queue
   * deleted after it. Process warnings are caught: `token_refused` is expected.
   */
  async function whileTokenRefused(count: number, publishedFirst: number, body: (refused: RefusedToken) => Promise<void>): Promise<void> {
    const right = { token: 'the-right-token-0123456789', tenant: 'a', scopes: ['produce', 'consume', 'read'] };
    const guarded = await startService(backend, { API_TOKENS: JSON.stringify([right]) });
    const warned = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const publisher = await admin.createConfirmChannel();
    const queue = `rollcall-test-${randomBytes(4).toString('hex')}`;
    try {
      await publisher.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
      const producer = new RollcallClient({ baseUrl: guarded.url, token: right.token });
      const ids: string[] = [];
      const batch = await openBatch(producer, { count, enqueue: async (chunk) => void ids.push(...chunk) });
      const send = async (n: number, itemId: string) => {
        publisher.sendToQueue(queue, Buffer.from(JSON.stringify({ n })), { headers: { [ITEM_ID_HEADER]: itemId }, persistent: true });
        await publisher.waitForConfirms();
      };
      for (let n = 0; n < publishedFirst; n++) await send(n, ids[n]!);
      const publishRest = async () => {
        for (let n = publishedFirst; n < count; n++) await send(n, ids[n]!);
      };
      let taken = false;
      const { client, seen } = swappingToken(guarded.url, () => (taken ? right.token : WRONG_TOKEN));
      const fix = () => void (taken = true);
      const refuse = () => void (taken = false);
      await body({ guarded, producer, queue, batch, ids, send, publishRest, client, seen, warned, fix, refuse });
    } finally {
      warned.mockRestore();
      await publisher.deleteQueue(queue);
      await publisher.close();
      await guarded.stop();
    }
  }

  /** A fresh channel, prefetch 20, that a test may see close with an error. */
  async function channelWithPrefetch(): Promise<Channel> {
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    await channel.prefetch(20);
    return channel;
  }

  /** How many of the queue's messages are ready (held or unsettled ones are not). */
  async function readyIn(queue: string): Promise<number> {
    const check = await admin.createChannel();
    try {
      return (await check.checkQueue(queue)).messageCount;
    } finally {
      await check.close();
    }
  }

  const tokenRefusedWarnings = (warned: RefusedToken['warned']) =>
    warned.mock.calls.filter(([warning]) => (warning as { code?: string }).code === 'token_refused');

  it(
    "when rollcall refuses a consumer's token (401), then after the first refused ack its messages are held unrun, and once the token is taken each runs once",
    () =>
      whileTokenRefused(21, 1, async ({ producer, queue, batch, publishRest, client, seen, warned, fix }) => {
        const runs = new Map<number, number>();
        const redelivered = new Set<number>();
        const channel = await channelWithPrefetch();
        await channel.consume(
          queue,
          rollcallConsumer(client, channel, (message) => {
            runs.set(numberOf(message), (runs.get(numberOf(message)) ?? 0) + 1);
            if (message.fields.redelivered) redelivered.add(numberOf(message));
          }),
        );
        await until(() => tokenRefusedWarnings(warned).length === 1); // the first message's ack refused, and the token looked up: refused
        await publishRest();
        await until(() => seen.whoami >= 2, 15_000); // refused again 5 s after the first answer
        expect([...runs]).toEqual([[0, 1]]); // the first message ran and its ack was refused; none since
        // Held, not returned: the consumer keeps its 20 prefetch places (the first message's second
        // delivery and 19 more), the 21st waits in the queue for a consumer with room.
        expect(await readyIn(queue)).toBe(1);
        expect(tokenRefusedWarnings(warned)).toHaveLength(1); // at most one a minute
        fix();
        expect(await producer.waitForCompletion(batch.id, { timeoutMs: 30_000 })).toMatchObject({ state: 'complete', succeeded: 21, failed: 0 });
        expect([...runs.values()].reduce((a, b) => a + b)).toBe(22); // each once, and the first once more
        expect([...redelivered]).toEqual([0]); // none went back to the queue but the refused run's
        await channel.close();
      }),
    60_000,
  );

  it(
    'when a consumer holding messages for a refused token is stopped, then drain returns them to the queue at once, unrun',
    () =>
      whileTokenRefused(5, 5, async ({ queue, client, seen }) => {
        let runs = 0;
        const channel = await channelWithPrefetch();
        const callback = rollcallConsumer(client, channel, () => void runs++);
        const { consumerTag } = await channel.consume(queue, callback);
        await until(() => seen.whoami >= 1); // each ran (once) before a refusal was learnt; now they are held
        const lookUps = seen.whoami;
        const ranBefore = runs;
        await channel.cancel(consumerTag);
        await callback.drain(); // without waiting for the next look-up, 5 s on, nor the hold's end
        expect(seen.whoami).toBe(lookUps);
        await channel.close();
        await until(async () => (await readyIn(queue)) === 5);
        expect(runs).toBe(ranBefore);
      }),
    30_000,
  );

  it(
    'when a consumer holding messages for a refused token is drained without a cancel, then those go back once and are held again, not returned over and over',
    () =>
      whileTokenRefused(3, 3, async ({ queue, client, seen }) => {
        const channel = await channelWithPrefetch();
        const { acking, numbersOf } = noting(channel);
        let deliveries = 0;
        const itemIdOf = (m: ConsumeMessage) => {
          deliveries += 1;
          return String(m.properties.headers?.[ITEM_ID_HEADER]);
        };
        const callback = rollcallConsumer(client, acking, () => undefined, { itemIdOf });
        await channel.consume(queue, callback);
        // Each ran, its ack refused, and it came back to be held.
        await until(() => seen.whoami >= 1 && numbersOf('reject').length === 3 && deliveries === 6);
        void callback.drain(); // still consuming: what goes back comes straight back to it
        await until(() => numbersOf('nack').length >= 3);
        await realSleep(1_000);
        expect(numbersOf('nack').sort()).toEqual([0, 1, 2]); // each went back once, and is held again on its return
        await channel.close();
      }),
    30_000,
  );

  it(
    'when the channel of a consumer holding messages for a refused token closes, then none of them runs once the token is taken: RabbitMQ gave them to another consumer',
    () =>
      whileTokenRefused(3, 3, async ({ producer, queue, batch, client, seen, fix }) => {
        const ran = { first: 0, second: 0 };
        const first = await channelWithPrefetch();
        await first.consume(
          queue,
          rollcallConsumer(client, first, () => void ran.first++),
        );
        await until(() => seen.whoami >= 1); // each ran before a refusal was learnt; now they are held
        const ranBefore = ran.first;
        await first.close(); // a dropped link: RabbitMQ takes the held messages back
        fix();
        const second = await channelWithPrefetch();
        await second.consume(
          queue,
          rollcallConsumer(client, second, () => void ran.second++),
        );
        // The second waits for the same look-up the first's messages waited for: taken, 5 s after the refusal.
        expect(await producer.waitForCompletion(batch.id, { timeoutMs: 20_000 })).toMatchObject({ state: 'complete', succeeded: 3 });
        expect(ran).toEqual({ first: ranBefore, second: 3 });
        await second.close();
      }),
    30_000,
  );

  it(
    'when a batch is cancelled while its messages are held for a refused token, then once the token is taken they are acked unrun',
    () =>
      whileTokenRefused(3, 3, async ({ producer, queue, batch, client, seen, fix }) => {
        let runs = 0;
        const channel = await channelWithPrefetch();
        const { acking, numbersOf } = noting(channel);
        await channel.consume(
          queue,
          rollcallConsumer(client, acking, () => void runs++),
        );
        await until(() => seen.whoami >= 1); // each ran before a refusal was learnt; now they are held
        const ranBefore = runs;
        await producer.cancel(batch.id);
        fix();
        await until(() => numbersOf('ack').length === 3, 15_000); // taken at the look-up 5 s after the refusal
        expect(runs).toBe(ranBefore);
        await channel.close();
      }),
    30_000,
  );

  it(
    'when the token is refused and a message comes of a batch the process knows is cancelled, then it is acked at once, not held',
    () =>
      whileTokenRefused(2, 0, async ({ producer, queue, batch, ids, send, client, seen, fix, refuse }) => {
        fix(); // taken at first
        const otherIds: string[] = [];
        await openBatch(producer, { count: 1, enqueue: async (chunk) => void otherIds.push(...chunk) });
        const runs: number[] = [];
        const channel = await channelWithPrefetch();
        const { acking, numbersOf } = noting(channel);
        await channel.consume(
          queue,
          rollcallConsumer(client, acking, (m) => void runs.push(numberOf(m))),
        );
        await producer.cancel(batch.id);
        await send(0, ids[0]!); // its look-up, with a token still taken, finds the cancel
        await until(() => numbersOf('ack').length === 1);
        refuse(); // the operator's mistake: the consumer's token is refused from now on
        await send(1, otherIds[0]!); // runs, its ack refused: the token is suspect, and found refused
        await until(() => seen.whoami >= 1);
        await send(2, ids[1]!);
        await until(() => numbersOf('ack').length === 2, 3_000); // at once, not after the hold (5 min) or the next look-up
        expect(seen.whoami).toBe(1);
        expect(runs).toEqual([1]);
        await channel.close();
      }),
    30_000,
  );

  it(
    'when a channel that goes on delivering after its close (a wrapper reconnecting underneath) brings a message while the token is refused, then it is held, not returned at once',
    () =>
      whileTokenRefused(3, 0, async ({ ids, client, seen }) => {
        // The test's own channel: an event emitter that settles nothing but notes what it is asked.
        const returned: number[] = [];
        const events = new EventEmitter();
        const channel: AckingChannel = {
          ack: () => undefined,
          nack: (m) => void returned.push(numberOf(m)),
          once: (event, listener) => events.once(event, listener),
        };
        const message = (n: number): ConsumeMessage =>
          ({
            content: Buffer.from(JSON.stringify({ n })),
            fields: { deliveryTag: n + 1, redelivered: false, consumerTag: 'test', exchange: '', routingKey: 'test' },
            properties: { headers: { [ITEM_ID_HEADER]: ids[n] } },
          }) as unknown as ConsumeMessage;
        const callback = rollcallConsumer(client, channel, () => undefined);
        callback(message(0)); // runs, its ack refused (401): returned as a failed delivery
        await until(() => returned.length === 1);
        callback(message(1)); // held, waiting for the look-up
        await until(() => seen.whoami >= 1);
        events.emit('close'); // the held message goes: the broker has it back
        await until(() => returned.length === 2);
        callback(message(2)); // delivered after the close: held again, not sent straight back
        await realSleep(500);
        expect(returned).toEqual([0, 1]);
        await callback.drain(); // and a drain still lets it go
        expect(returned).toEqual([0, 1, 2]);
      }),
    30_000,
  );

  it(
    'when twenty messages are held for a refused token in one process, then Node gives no listener-leak warning for the drain they listen for',
    () =>
      whileTokenRefused(21, 0, async ({ guarded, ids }) => {
        const child = spawn(process.execPath, ['--import', 'tsx', 'test/integrations/fixtures/heldMessages.ts'], {
          cwd: path.resolve(__dirname, '../..'),
          env: { ...process.env, ROLLCALL_URL: guarded.url, ITEM_IDS: JSON.stringify(ids) },
          stdio: ['ignore', 'pipe', 'inherit'],
        });
        let output = '';
        child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
        await new Promise((resolve) => child.once('exit', resolve));
        const { returned, warnings } = JSON.parse(output) as { returned: number; warnings: string[] };
        expect(returned).toBe(21); // the first message's refused run, and the twenty held ones the drain let go
        expect(warnings).not.toContain('MaxListenersExceededWarning');
      }),
    30_000,
  );

  it(
    "when a token stays refused past the consumer's retryForMs, then its held message goes back to the queue unrun, as a delivery that did not fail",
    () =>
      whileTokenRefused(1, 1, async ({ queue, client }) => {
        let runs = 0;
        const channel = await channelWithPrefetch();
        const { acking, settles } = noting(channel);
        await channel.consume(
          queue,
          rollcallConsumer(client, acking, () => void runs++, { retryForMs: 1_000 }),
        );
        await until(() => settles.length >= 2, 15_000);
        // Its run's ack refused: a failed delivery. Then held past 1 s, to the next look-up: returned unrun.
        expect({ runs, settles: settles.slice(0, 2) }).toEqual({
          runs: 1,
          settles: [
            { how: 'reject', n: 0, requeue: true },
            { how: 'nack', n: 0, requeue: true },
          ],
        });
        await channel.close();
      }),
    30_000,
  );

  it('when itemIdOf throws or gives no string on some messages and onError throws too, then those are dropped and the rest still flow', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(client, 30);
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    await channel.prefetch(5); // five messages left unsettled would stop this consumer
    const told: string[] = [];
    await channel.consume(
      queue,
      rollcallConsumer(client, channel, () => undefined, {
        itemIdOf: (message) => {
          if (numberOf(message) % 3 === 0) throw new Error(`unreadable message ${numberOf(message)}`);
          if (numberOf(message) % 3 === 1) return numberOf(message) as unknown as string; // a numeric header, say
          return String(message.properties.headers?.['x-rollcall-item-id']);
        },
        onError: (error) => {
          told.push(error.message);
          throw new Error('the error reporter is broken too');
        },
      }),
    );
    for (let i = 0; i < 150 && (await client.status(batch.id)).succeeded < 10; i++) await new Promise((resolve) => setTimeout(resolve, 100));
    await drained(queue);
    expect(await client.status(batch.id)).toMatchObject({ succeeded: 10, failed: 0, pending: 20 });
    expect(told.filter((message) => message.startsWith('unreadable')).sort()).toEqual(
      [0, 3, 6, 9, 12, 15, 18, 21, 24, 27].map((n) => `unreadable message ${n}`).sort(),
    );
    expect(told.filter((message) => /has no x-rollcall-item-id/.test(message))).toHaveLength(10);
    expect(told).toHaveLength(20);
  });

  it('when itemIdOf is async (plain JavaScript lets it be) and its promises reject, then none goes unhandled, onError says why, and the messages are dropped', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(client, 5);
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    const told: string[] = [];
    const asyncItemIdOf = async (): Promise<string> => Promise.reject(new Error('no ID to be read'));
    await channel.consume(
      queue,
      rollcallConsumer(client, channel, () => undefined, {
        itemIdOf: asyncItemIdOf as unknown as (message: ConsumeMessage) => string,
        onError: (error) => told.push(error.message),
      }),
    );
    await until(() => told.length >= 5, 10_000);
    await drained(queue);
    await realSleep(100); // a rejection left unhandled would be reported by now, failing this test
    expect(told).toEqual(Array(5).fill('itemIdOf gave a promise; it must give the item ID itself (not async)'));
    expect(await client.status(batch.id)).toMatchObject({ succeeded: 0, pending: 5 });
  });

  // An unhandled rejection fails the test that made it (Jest's own handler: a listener on `process`
  // here would not hear it, as Jest's `process` is a copy).
  it('when onError is async and rejects, then no rejection goes unhandled and the messages are still settled', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue } = await produce(client, 10);
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    let told = 0;
    const callback = rollcallConsumer(client, channel, () => undefined, {
      itemIdOf: () => undefined, // every message lacks its ID: each is reported
      onError: async () => {
        told++;
        throw new Error('the alerting service is down');
      },
    });
    const { consumerTag } = await channel.consume(queue, callback);
    await expectNoneUnsettled(queue, { channel, consumerTag, callback });
    await drained(queue);
    expect(told).toBe(10);
  });

  it("when the channel's ack throws (not for a closed channel) or an async ack rejects, then onError is told settle_failed, and no rejection goes unhandled", async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(client, 2);
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    const told: string[] = [];
    const brokenAcks = {
      // A wrapper written wrongly (an unbound method, say), and one whose async ack rejects.
      ack: (m: ConsumeMessage) => {
        if (numberOf(m) === 0) throw new TypeError('ack is not bound');
        return Promise.reject(new Error('the metrics service is down')) as unknown as void;
      },
      nack: (m: ConsumeMessage, allUpTo?: boolean, requeue?: boolean) => channel.nack(m, allUpTo, requeue),
    };
    const consume = rollcallConsumer(client, brokenAcks, () => undefined, {
      onError: (error) => told.push(`${(error as { code?: string }).code}: ${error.message}`),
    });
    await channel.consume(queue, consume);
    await until(() => told.length === 2);
    await consume.drain();
    expect(told.sort()).toEqual([
      expect.stringMatching(/^settle_failed: message \d+ could not be settled \(ack\): ack is not bound$/),
      expect.stringMatching(/^settle_failed: message \d+ could not be settled \(ack\): the metrics service is down$/),
    ]);
    expect(await client.status(batch.id)).toMatchObject({ succeeded: 2, pending: 0 }); // rollcall was told first
    await channel.close(); // the two unacked messages go back to the queue
    const check = await admin.createChannel();
    await check.deleteQueue(queue);
    await check.close();
  });

  it('when a message arrives for the first time with an x-delivery-count of its own (republished with copied headers), then it still gets its maxDeliveries reruns', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const queue = `rollcall-test-${randomBytes(4).toString('hex')}`;
    const publisher = await admin.createConfirmChannel();
    await publisher.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    const batch = await openBatch(client, {
      count: 1,
      enqueue: async ([id]) => {
        publisher.sendToQueue(queue, Buffer.from('{"n":0}'), { headers: { 'x-rollcall-item-id': id, 'x-delivery-count': 5 }, persistent: true });
        await publisher.waitForConfirms();
      },
    });
    await publisher.close();
    let runs = 0;
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    await channel.consume(
      queue,
      rollcallConsumer(client, channel, () => {
        runs++;
        throw new Error('fails every time');
      }),
    );
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', failed: 1 });
    expect(runs).toBe(4); // maxDeliveries 3: the first delivery and three reruns
    await drained(queue);
  });

  it('when itemIdOf reads an ID with a lone surrogate from the body, then each message is still settled (ack_rejected), none holds its prefetch place', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue } = await produce(client, 3);
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    await channel.prefetch(1); // one message left unsettled would stop this consumer
    const codes: string[] = [];
    const consume = rollcallConsumer(client, channel, () => undefined, {
      itemIdOf: (message) => `${String(message.properties.headers?.['x-rollcall-item-id'])}\ud800`,
      onError: (error) => codes.push((error as { code?: string }).code ?? error.message),
    });
    await channel.consume(queue, consume);
    await until(() => codes.length === 3, 20_000);
    await consume.drain();
    expect(codes).toEqual(['ack_rejected', 'ack_rejected', 'ack_rejected']);
    const check = await admin.createChannel();
    expect((await check.checkQueue(queue)).messageCount).toBe(0);
    await check.deleteQueue(queue);
    await check.close();
  });

  /** Message n's throw: the same value for both, or one of its own each. */
  const throwsOf = (thrown: (n: number) => unknown) => (message: ConsumeMessage) => {
    throw thrown((JSON.parse(message.content.toString()) as { n: number }).n);
  };

  it.each([
    ['a value that cannot be made text (Object.create(null))', () => Object.create(null) as unknown, ['a thrown [object Object]', 'a thrown [object Object]']],
    [
      "a plain { message } object or another realm's Error",
      (n: number) => (n === 0 ? { message: 'quota exceeded', code: 429 } : vm.runInNewContext("new Error('boom')")) as unknown,
      ['boom', 'quota exceeded'],
    ],
  ])(
    'when the handler throws %s on the last delivery, then the failure is recorded with its reason and the message settled',
    async (_what, thrown, reasons) => {
      const client = new RollcallClient({ baseUrl: svc.url });
      const { queue, batch } = await produce(client, 2);
      const channel = await (await connect()).createChannel();
      channel.on('error', () => undefined);
      const consume = rollcallConsumer(client, channel, throwsOf(thrown), { maxDeliveries: 0 });
      await channel.consume(queue, consume);
      expect(await client.waitForCompletion(batch.id, { timeoutMs: 20_000 })).toMatchObject({ state: 'complete', failed: 2 });
      expect((await client.failures(batch.id)).failures.map((f) => f.error).sort()).toEqual(reasons);
      await consume.drain();
      await drained(queue);
    },
  );

  it('when RabbitMQ cancels the consumer (its queue is deleted), then onCancelled is told', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue } = await produce(client, 1);
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    let cancelledCalls = 0;
    await channel.consume(
      queue,
      rollcallConsumer(client, channel, () => undefined, { onCancelled: () => void cancelledCalls++ }),
    );
    const other = await admin.createChannel();
    await other.deleteQueue(queue);
    await other.close();
    await until(() => cancelledCalls > 0);
    expect(cancelledCalls).toBe(1);
  });

  it("when rollcall rejects a message's ack (unknown_batch: a token of another tenant sees every batch so), then the message is dead-lettered, and replayed from there it is recorded", async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const deadLetters = `rollcall-test-dead-${randomBytes(4).toString('hex')}`;
    const setup = await admin.createChannel();
    await setup.assertQueue(deadLetters, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    const { queue, batch } = await produce(client, 5, { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': deadLetters });
    const codes: string[] = [];
    const channel = await (await connect()).createChannel();
    const elsewhere = rollcallConsumer(client, channel, () => undefined, {
      // The same group and index in a batch this tenant does not have.
      itemIdOf: (message) => String(message.properties.headers?.['x-rollcall-item-id']).replace(batch.id, randomUUID()),
      onError: (error) => codes.push((error as { code?: string }).code ?? error.message),
    });
    const { consumerTag } = await channel.consume(queue, elsewhere);
    await until(async () => (await setup.checkQueue(deadLetters)).messageCount === 5, 10_000);
    await channel.cancel(consumerTag);
    await elsewhere.drain();
    expect(codes).toEqual(Array(5).fill('ack_rejected'));
    const replay = rollcallConsumer(client, channel, () => undefined);
    await channel.consume(deadLetters, replay);
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 10_000 })).toMatchObject({ state: 'complete', succeeded: 5, pending: 0 });
    await replay.drain();
    await setup.deleteQueue(deadLetters);
    await setup.close();
    await drained(queue);
  });

  it('when a batch is cancelled before its messages are consumed, then none of them runs and all are acked', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(client, 100);
    await client.cancel(batch.id);
    const runs = new Map<number, number>();
    await expectNoneUnsettled(queue, await consumer(await connect(), queue, client, runs, 0));
    await drained(queue);
    expect(runs.size).toBe(0);
    expect(await client.status(batch.id)).toMatchObject({ state: 'cancelled', pending: 100 });
  });

  it('when the channel closes while its messages wait for the cancel look-up, then none of them runs there, and another consumer runs each once', async () => {
    const producing = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(producing, 5);
    let lookups = 0;
    let release = () => undefined as void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const send = httpSend();
    // rollcall slow to answer the look-up (it may take up to the client's timeoutMs)
    const slowLookups: HttpSend = async (target, request) => {
      if (target.includes('/v1/items/')) {
        lookups += 1;
        await released;
      }
      return send(target, request);
    };
    const runs = new Map<number, number>();
    const first = await consumer(await connect(), queue, new RollcallClient({ baseUrl: svc.url, fetch: slowLookups }), runs, 0);
    await until(() => lookups >= 1, 10_000);
    await realSleep(300); // all five delivered (prefetch 20), each waiting on that look-up
    await first.channel.close(); // RabbitMQ takes them back
    release();
    await realSleep(500);
    expect(runs.size).toBe(0); // before, all five ran here too, for nothing: their acks could not reach RabbitMQ
    const again = new Map<number, number>();
    const second = await consumer(await connect(), queue, producing, again, 0);
    await until(async () => (await producing.status(batch.id)).state === 'complete', 15_000);
    await expectNoneUnsettled(queue, second);
    await drained(queue);
    // Each as often as its deliveries left allow, and no more. The quorum queue (RabbitMQ 3.10,
    // Debian's) counted the delivery to the closed channel: a failing message has 3 of its 4 left,
    // and a flaky one, on its second delivery, succeeds at once.
    for (let n = 0; n < 5; n++) expect([n, again.get(n)]).toEqual([n, { permanent: 3, unrecoverable: 3, flaky: 1, ok: 1 }[kindOf(n)]]);
    expect(runs.size).toBe(0);
  });

  it('when the channel closes while a handler runs its last delivery and the handler throws for it, then no failure is recorded: RabbitMQ has the message back, and its rerun decides the item', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(client, 1, { 'x-delivery-limit': 6 });
    const channel = await (await connect()).createChannel();
    channel.on('error', () => undefined);
    let ran = false;
    await channel.consume(
      queue,
      rollcallConsumer(
        client,
        channel,
        async () => {
          ran = true;
          await channel.close(); // the connection drops while the handler publishes its result, say
          throw new Error('Channel closed');
        },
        { maxDeliveries: 0 },
      ),
    );
    await until(() => ran, 10_000);
    const other = await (await connect()).createChannel();
    const callback = rollcallConsumer(client, other, () => undefined, { maxDeliveries: 0 }); // the rerun succeeds
    const second = { channel: other, consumerTag: (await other.consume(queue, callback)).consumerTag, callback };
    const done = await client.waitForCompletion(batch.id, { timeoutMs: 15_000 });
    expect(done).toMatchObject({ state: 'complete', succeeded: 1, failed: 0 }); // before: failed, with the closed channel as its reason
    await expectNoneUnsettled(queue, second);
    await drained(queue);
  });

  it('when every run of a message closes its own channel and throws (a publish to a missing exchange on it), then the failure is recorded two deliveries past maxDeliveries, not never', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(client, 1, { 'x-delivery-limit': 6 });
    let runs = 0;
    const connection = await connect();
    while ((await client.status(batch.id)).state !== 'complete' && runs < 6) {
      const channel = await connection.createChannel();
      channel.on('error', () => undefined);
      const before = runs;
      const closing = async () => {
        runs += 1;
        await channel.close();
        throw new Error('the handler closed its own channel');
      };
      await channel.consume(queue, rollcallConsumer(client, channel, closing, { maxDeliveries: 0 }));
      await until(() => runs > before, 10_000);
      await realSleep(300); // its failure, if recorded, reaches rollcall
    }
    expect([runs, await client.status(batch.id)]).toEqual([3, expect.objectContaining({ state: 'complete', failed: 1 })]);
    expect((await client.failures(batch.id)).failures[0]?.error).toBe('the handler closed its own channel');
    await (await admin.createChannel()).deleteQueue(queue);
  });

  it('when a handler opens a child batch for its own item and returns handedToChild, then its message is acked and its item waits for the child', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch: parent } = await produce(client, 3);
    const childQueue = `rollcall-test-${randomBytes(4).toString('hex')}`;
    const publisher = await admin.createConfirmChannel();
    await publisher.assertQueue(childQueue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    let child = '';
    const channel = await (await connect()).createChannel();
    const callback = rollcallConsumer(client, channel, async (message) => {
      if (numberOf(message) !== 0) return;
      const opened = await openBatch(client, {
        count: 2,
        parentItem: String(message.properties.headers?.[ITEM_ID_HEADER]),
        enqueue: async (ids) => {
          for (const id of ids) publisher.sendToQueue(childQueue, Buffer.from('{}'), { headers: { [ITEM_ID_HEADER]: id }, persistent: true });
          await publisher.waitForConfirms();
        },
      });
      child = opened.id;
      return handedToChild();
    });
    const { consumerTag } = await channel.consume(queue, callback);
    await until(async () => child !== '' && (await client.status(parent.id)).succeeded === 2, 10_000);
    await expectNoneUnsettled(queue, { channel, consumerTag, callback });
    expect(await client.status(parent.id)).toMatchObject({ state: 'sealed', succeeded: 2, pending: 1 });

    const childChannel = await (await connect()).createChannel();
    const failing = () => Promise.reject(new Error('one part failed'));
    await childChannel.consume(childQueue, rollcallConsumer(client, childChannel, failing, { maxDeliveries: 0 }));
    expect(await client.waitForCompletion(child, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', failed: 2 });
    expect(await svc.rollcall.childOutcomes.deliverDue()).toBe(1); // what the service's loop does within a few seconds
    expect(await client.status(parent.id)).toMatchObject({ state: 'complete', succeeded: 2, failed: 1 });
    await drained(queue);
    await drained(childQueue);
    await publisher.close();
  });

  it('when a consumer is killed with SIGKILL mid-stream, then redelivery keeps the counts exact', async () => {
    const producerClient = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(producerClient, 2000);
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/integrations/fixtures/amqpConsumer.ts'], {
      cwd: path.resolve(__dirname, '../..'),
      env: { ...process.env, ROLLCALL_URL: svc.url, AMQP_URL: url.toString(), QUEUE: queue, WORK_MS: '20' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    let childCompletions = 0;
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      if (line === `COMPLETED ${batch.id}`) childCompletions++;
    });
    // 20 ms of work a message, 50 at a time: ~2,500 a second at most, so ~600 ms of messages are left
    // after the first 500, where the kill must land.
    for (;;) {
      const now = await producerClient.status(batch.id);
      if (now.succeeded + now.failed >= 500) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    child.kill('SIGKILL'); // with acks on their way to rollcall and messages not yet acked
    await exited;
    expect((await producerClient.status(batch.id)).pending).toBeGreaterThan(0);
    const tally = countingFetch();
    const client = new RollcallClient({ baseUrl: svc.url, fetch: tally.fetch });
    await consumer(await connect(), queue, client, new Map(), 0);
    const done = await producerClient.waitForCompletion(batch.id, { timeoutMs: 60_000 });
    expect(done).toMatchObject({ state: 'complete', ...expected(2000), pending: 0 });
    await tally.settled();
    await drained(queue);
    expect(childCompletions + (tally.completions.get(batch.id) ?? 0)).toBe(1);
  });

  it('when one of two consumers of 2,000 messages loses its link, then counts are exact, one completion', async () => {
    const producerClient = new RollcallClient({ baseUrl: svc.url });
    const { queue, batch } = await produce(producerClient, 2000);
    const tallies: AckTally[] = [countingFetch(), countingFetch()];
    const clients = tallies.map((t) => new RollcallClient({ baseUrl: svc.url, fetch: t.fetch }));
    const proxy = new TcpProxy(url.hostname, Number(url.port || 5672));
    await proxy.open();
    const runs = new Map<number, number>();
    await consumer(await connect(), queue, clients[0]!, runs, 5);
    await consumer(await connect(proxy), queue, clients[1]!, runs, 5);
    for (;;) {
      const now = await producerClient.status(batch.id);
      if (now.succeeded + now.failed >= 500) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(tallies[1]!.calls).toBeGreaterThan(0); // the consumer cut off was at work: the cut takes messages from it
    await proxy.cut(); // the second consumer's connection is gone, with the messages it held unacked
    const done = await producerClient.waitForCompletion(batch.id, { timeoutMs: 60_000 });
    expect(done).toMatchObject({ state: 'complete', ...expected(2000), pending: 0 });
    for (let n = 0; n < 2000; n++) expect(runs.get(n) ?? 0).toBeGreaterThan(0);
    await Promise.all(tallies.map((t) => t.settled()));
    await drained(queue);
    expect(tallies.reduce((sum, t) => sum + (t.completions.get(batch.id) ?? 0), 0)).toBe(1);
    // Coalesced: without it, one call per message (2,000). How many IDs share a call depends on how
    // fast rollcall answers (a quick answer sends the next call sooner, with fewer IDs): ~500 here
    // since the service starts a round at once when none runs, so the bound leaves that room.
    expect(tallies.reduce((sum, t) => sum + t.calls, 0)).toBeLessThan(2000 / 2);
  });
});

describe('rollcall/amqp on a channel that outlives its consumers', () => {
  it('when consumers are made and dropped on one long-lived channel, then the channel does not keep them', async () => {
    v8.setFlagsFromString('--expose-gc');
    const collectGarbage = vm.runInNewContext('gc') as () => void;
    const events = new EventEmitter();
    const channel: AckingChannel = { ack: () => undefined, nack: () => undefined, once: (event, listener) => events.once(event, listener) };
    const client = new RollcallClient({ baseUrl: 'http://127.0.0.1:9' });
    // Each consumer's options are its own object: the consumer keeps them, so they live as long as it does.
    // (Made in a function of their own: V8 may keep a loop's last object alive in the loop's frame.)
    const makeAndDrop = (): WeakRef<RollcallConsumerOptions> => {
      const options: RollcallConsumerOptions = { onError: () => undefined };
      rollcallConsumer(client, channel, () => undefined, options); // made, then dropped (as after a cancel)
      return new WeakRef(options);
    };
    const optionsOfDropped = Array.from({ length: 100 }, makeAndDrop);
    let keptRuns = 0;
    const kept = rollcallConsumer(client, channel, () => void (keptRuns += 1), { cancelCheckIntervalMs: 0 });
    // A WeakRef's target lives to the end of the turn that made or read it: collected in later turns.
    for (let round = 0; round < 3; round++) {
      await realSleep(10);
      collectGarbage();
    }
    expect(optionsOfDropped.map((ref, n) => (ref.deref() ? n : -1)).filter((n) => n >= 0)).toEqual([]);
    // The consumer still in use still hears of the close: a message it is given after it does not run
    // (RabbitMQ has it back, for another consumer).
    expect(events.listenerCount('close')).toBe(1);
    events.emit('close');
    kept({
      content: Buffer.from('{}'),
      fields: { deliveryTag: 1, redelivered: false, consumerTag: 'kept', exchange: '', routingKey: 'test' },
      properties: { headers: { [ITEM_ID_HEADER]: `${randomUUID()}:${randomUUID()}:0` } },
    } as unknown as ConsumeMessage);
    await realSleep(100);
    expect(keptRuns).toBe(0);
    await kept.drain();
  });
});
