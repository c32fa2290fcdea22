import { randomBytes, randomUUID } from 'node:crypto';

import amqp, { Channel, ChannelModel, ConfirmChannel, ConsumeMessage, GetMessage } from 'amqplib';

import { Batch, RollcallClient } from '../../src/client';
import { DONE_HEADER, rollcallConsumer, RollcallConsumerOptions, rollcallDeadLetterConsumer, RollcallDeadLetterOptions } from '../../src/integrations/amqp';
import { doneMarkOf } from '../../src/integrations/amqpDoneCopies';
import { openBatch } from '../../src/integrations/producer';
import { backends } from '../helpers/backends';
import { amqpUrl, describeWith } from '../helpers/brokers';
import { acksRefusedWhile, swappingToken } from '../helpers/countingFetch';
import { realSleep, until } from '../helpers/realTime';
import { startService, TestService } from '../helpers/service';
import { TcpProxy } from '../helpers/tcpProxy';
import { numberOf } from './fixtures/messages';

/**
 * The topology integrations.md advises: the work queue dead-letters to a fanout exchange, which
 * copies each dead letter to `kept` (for people, and for replays) and to `recorded` (for
 * rollcallDeadLetterConsumer). `recorded` passes what it does not record on to `parked`.
 */
interface Topology {
  work: string;
  kept: string;
  recorded: string;
  parked: string;
}

describeWith(amqpUrl).each(backends())('rollcall/amqp dead letters on a real RabbitMQ and a real rollcall service (%s)', (_name, backend) => {
  let svc: TestService;
  let connection: ChannelModel;
  let admin: ConfirmChannel;
  const queues: string[] = [];
  const exchanges: string[] = [];

  beforeAll(async () => {
    svc = await startService(backend);
    connection = await amqp.connect(amqpUrl as string);
    connection.on('error', () => undefined);
    admin = await connection.createConfirmChannel();
  });
  afterAll(async () => {
    for (const queue of queues) await admin.deleteQueue(queue);
    for (const exchange of exchanges) await admin.deleteExchange(exchange);
    await connection.close();
    await svc.stop();
  });

  async function topology(workArguments: Record<string, unknown>): Promise<Topology> {
    const name = `rollcall-test-${randomBytes(4).toString('hex')}`;
    const t: Topology = { work: name, kept: `${name}-kept`, recorded: `${name}-recorded`, parked: `${name}-parked` };
    const deadLetters = `${name}-dead`;
    await admin.assertExchange(deadLetters, 'fanout', { durable: true });
    await admin.assertQueue(t.kept, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    await admin.assertQueue(t.parked, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    await admin.assertQueue(t.recorded, {
      durable: true,
      arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': 2, 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': t.parked },
    });
    await admin.bindQueue(t.kept, deadLetters, '');
    await admin.bindQueue(t.recorded, deadLetters, '');
    await admin.assertQueue(t.work, { durable: true, arguments: { 'x-queue-type': 'quorum', 'x-dead-letter-exchange': deadLetters, ...workArguments } });
    queues.push(t.work, t.kept, t.recorded, t.parked);
    exchanges.push(deadLetters);
    return t;
  }

  async function produce(client: RollcallClient, queue: string, count: number): Promise<Batch> {
    let n = 0;
    return openBatch(client, {
      count,
      enqueue: async (ids) => {
        for (const id of ids) admin.sendToQueue(queue, Buffer.from(JSON.stringify({ n: n++ })), { headers: { 'x-rollcall-item-id': id }, persistent: true });
        await admin.waitForConfirms();
      },
    });
  }

  async function recordDeadLetters(
    client: RollcallClient,
    queue: string,
    options: RollcallDeadLetterOptions = {},
  ): Promise<{ channel: Channel; errors: string[]; stop(): Promise<void> }> {
    const channel = await connection.createChannel();
    const errors: string[] = [];
    const callback = rollcallDeadLetterConsumer(client, channel, {
      ...options,
      onError: (error) => errors.push((error as { code?: string }).code ?? error.message),
    });
    const { consumerTag } = await channel.consume(queue, callback);
    /** Stops as the docs say: no more dead letters, those taken settled (acked after rollcall's answer), then closed. */
    const stop = async () => {
      await channel.cancel(consumerTag);
      await callback.drain();
      await channel.close();
    };
    return { channel, errors, stop };
  }

  const contentOf = (message: GetMessage) => ({ body: message.content.toString(), itemId: String(message.properties.headers?.['x-rollcall-item-id']) });
  const byItemId = (a: { itemId: string }, b: { itemId: string }) => a.itemId.localeCompare(b.itemId);

  const count = async (queue: string): Promise<number> => (await admin.checkQueue(queue)).messageCount;

  /** The messages in a queue, taken off it. */
  async function takeAll(queue: string): Promise<GetMessage[]> {
    const taken: GetMessage[] = [];
    for (let message = await admin.get(queue, { noAck: true }); message; message = await admin.get(queue, { noAck: true })) taken.push(message);
    return taken;
  }

  it("when a message's deliveries are cut short past the queue's x-delivery-limit, then its item is recorded failed and the batch completes", async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const t = await topology({ 'x-delivery-limit': 1 });
    const batch = await produce(client, t.work, 4);
    // Message 0 hangs its worker every time, and the worker is killed (its channel closed) each time.
    for (let delivery = 0; delivery < 2; delivery++) {
      const channel = await connection.createChannel();
      channel.on('error', () => undefined);
      let hung = false;
      await channel.consume(
        t.work,
        rollcallConsumer(client, channel, (message) => {
          if (numberOf(message) !== 0) return undefined;
          hung = true;
          return new Promise(() => undefined);
        }),
      );
      await until(() => hung, 10_000);
      // The others are settled before the worker dies: only message 0 is cut short.
      await until(async () => (await client.status(batch.id)).succeeded === 3, 10_000);
      await new Promise((resolve) => setTimeout(resolve, 100)); // their message acks, just after rollcall's
      await channel.close();
    }
    // RabbitMQ has given message 0 up: without the dead-letter consumer, its item stays pending.
    await until(async () => (await count(t.recorded)) === 1, 10_000);
    expect(await client.status(batch.id)).toMatchObject({ state: 'sealed', succeeded: 3, pending: 1 });
    const { channel: recorder, errors } = await recordDeadLetters(client, t.recorded);
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', succeeded: 3, failed: 1, pending: 0 });
    const { failures } = await client.failures(batch.id);
    expect(failures).toEqual([expect.objectContaining({ error: `dead-lettered by RabbitMQ (delivery_limit) from queue ${t.work}` })]);
    await until(async () => (await count(t.recorded)) === 0 && (await count(t.kept)) === 1, 10_000);
    expect(await count(t.parked)).toBe(0);
    expect(errors).toEqual([]);
    await recorder.close();
  });

  it('when messages expire in their queue (x-message-ttl) before any consumer takes them, then every item is recorded failed', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const t = await topology({ 'x-message-ttl': 50 });
    const batch = await produce(client, t.work, 30);
    const { channel: recorder } = await recordDeadLetters(client, t.recorded);
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', succeeded: 0, failed: 30 });
    const { failures } = await client.failures(batch.id, { limit: 1 });
    expect(failures[0]?.error).toBe(`dead-lettered by RabbitMQ (expired) from queue ${t.work}`);
    await recorder.close();
  });

  it('when rollcallConsumer dead-letters messages rollcall refused, then they are passed on to the parking queue untouched, and can be replayed from there', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const t = await topology({});
    const batch = await produce(client, t.work, 5);
    const published = (await takeAll(t.work)).map(contentOf);
    for (const message of published)
      admin.sendToQueue(t.work, Buffer.from(message.body), { headers: { 'x-rollcall-item-id': message.itemId }, persistent: true });
    await admin.waitForConfirms();
    const { channel: recorder, errors } = await recordDeadLetters(client, t.recorded);
    const channel = await connection.createChannel();
    const elsewhere = rollcallConsumer(client, channel, () => undefined, {
      // The same group and index in a batch this tenant does not have: each ack is refused.
      itemIdOf: (message) => String(message.properties.headers?.['x-rollcall-item-id']).replace(batch.id, randomUUID()),
    });
    const { consumerTag } = await channel.consume(t.work, elsewhere);
    await until(async () => (await count(t.parked)) === 5, 10_000);
    await channel.cancel(consumerTag);
    await elsewhere.drain();
    expect(errors).toEqual([]); // a consumer's own rejection is not the dead-letter consumer's failure
    expect(await client.status(batch.id)).toMatchObject({ state: 'sealed', pending: 5, failed: 0 });
    const parked = await takeAll(t.parked);
    expect(parked.map(contentOf).sort(byItemId)).toEqual([...published].sort(byItemId));
    for (const message of parked) admin.sendToQueue(t.parked, message.content, { headers: message.properties.headers });
    await admin.waitForConfirms();
    const replay = rollcallConsumer(client, channel, () => undefined);
    await channel.consume(t.parked, replay);
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 10_000 })).toMatchObject({ state: 'complete', succeeded: 5, failed: 0 });
    await replay.drain();
    await channel.close();
    await recorder.close();
  });

  it('when a dead letter is for a batch rollcall does not know, or has no item ID, then onError is told and it is parked, not lost', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const t = await topology({});
    const batch = await produce(client, t.work, 1);
    const [message] = await takeAll(t.work);
    const unknown = String(message?.properties.headers?.['x-rollcall-item-id']).replace(batch.id, randomUUID());
    const deadLetter = { 'x-first-death-reason': 'delivery_limit', 'x-first-death-queue': t.work };
    admin.sendToQueue(t.recorded, Buffer.from('unknown batch'), { headers: { ...deadLetter, 'x-rollcall-item-id': unknown } });
    admin.sendToQueue(t.recorded, Buffer.from('no item ID'), { headers: deadLetter });
    const { channel: recorder, errors } = await recordDeadLetters(client, t.recorded);
    await until(async () => (await count(t.parked)) === 2, 10_000);
    expect(errors.sort()).toEqual(['ack_rejected', 'missing_item_id']);
    expect((await takeAll(t.parked)).map((parked) => parked.content.toString()).sort()).toEqual(['no item ID', 'unknown batch']);
    expect(await client.status(batch.id)).toMatchObject({ pending: 1 });
    await recorder.close();
  });

  it('when the dead letter of an item that already succeeded arrives (its message ack was lost), then the item stays succeeded', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const t = await topology({});
    const batch = await produce(client, t.work, 2);
    const messages = await takeAll(t.work);
    const ids = messages.map((message) => String(message.properties.headers?.['x-rollcall-item-id']));
    await client.ack([ids[0] as string]);
    // Headers written by hand, x-first-death-* only (as a republisher that drops x-death leaves them).
    for (const id of ids)
      admin.sendToQueue(t.recorded, Buffer.from('{}'), {
        headers: { 'x-rollcall-item-id': id, 'x-first-death-reason': 'delivery_limit', 'x-first-death-queue': t.work },
      });
    const { channel: recorder } = await recordDeadLetters(client, t.recorded);
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 10_000 })).toMatchObject({ state: 'complete', succeeded: 1, failed: 1 });
    await recorder.close();
  });

  it("when the dead letter of an item already recorded failed arrives (the worker's failure was recorded, its message's ack lost), then the worker's reason stays", async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const t = await topology({});
    const batch = await produce(client, t.work, 2);
    const ids = (await takeAll(t.work)).map((message) => String(message.properties.headers?.['x-rollcall-item-id']));
    await client.ack([ids[0] as string], { outcome: 'failed', error: 'the thumbnail service answered 500' });
    for (const id of ids)
      admin.sendToQueue(t.recorded, Buffer.from('{}'), {
        headers: { 'x-rollcall-item-id': id, 'x-first-death-reason': 'delivery_limit', 'x-first-death-queue': t.work },
      });
    const { errors, stop } = await recordDeadLetters(client, t.recorded);
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 10_000 })).toMatchObject({ state: 'complete', failed: 2 });
    const reasons = Object.fromEntries((await client.failures(batch.id)).failures.map((f) => [f.id, f.error]));
    expect(reasons).toEqual({
      [ids[0] as string]: 'the thumbnail service answered 500',
      [ids[1] as string]: `dead-lettered by RabbitMQ (delivery_limit) from queue ${t.work}`,
    });
    // The completion is rollcall's answer; the dead letter's own ack follows it: let it land before the close.
    await stop();
    expect([await count(t.recorded), await count(t.parked), errors]).toEqual([0, 0, []]);
  });

  it('when a dead letter was rejected by a consumer, then it is recorded only where options.reasons names rejected', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const t = await topology({});
    const batch = await produce(client, t.work, 2);
    const channel = await connection.createChannel();
    const rejecting = async (message: ConsumeMessage | null) => message && channel.reject(message, false); // a consumer's own "poison" rule
    await channel.consume(t.work, (message) => void rejecting(message));
    await until(async () => (await count(t.recorded)) === 2, 10_000);
    await channel.close();
    const { channel: passing } = await recordDeadLetters(client, t.recorded);
    await until(async () => (await count(t.parked)) === 2, 10_000);
    await passing.close();
    expect(await client.status(batch.id)).toMatchObject({ pending: 2 });
    const { channel: recorder } = await recordDeadLetters(client, t.parked, { reasons: ['rejected', 'delivery_limit'] });
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 10_000 })).toMatchObject({ state: 'complete', failed: 2 });
    expect((await client.failures(batch.id)).failures[0]?.error).toBe(`dead-lettered by RabbitMQ (rejected) from queue ${t.recorded}`);
    await recorder.close();
  });

  it('when x-last-death-reason (RabbitMQ 3.13 on) names a later death than the first entry of x-death, then the later one decides', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const t = await topology({});
    const batch = await produce(client, t.work, 1);
    const [message] = await takeAll(t.work);
    // Replayed once after a consumer rejected it, then past its delivery limit: an entry counted again, not moved to the front.
    const deaths = [
      { reason: 'rejected', queue: t.work, count: 1, exchange: '', 'routing-keys': [t.work] },
      { reason: 'delivery_limit', queue: t.work, count: 2, exchange: '', 'routing-keys': [t.work] },
    ];
    const headers = {
      'x-rollcall-item-id': message?.properties.headers?.['x-rollcall-item-id'],
      'x-death': deaths,
      'x-last-death-reason': 'delivery_limit',
      'x-last-death-queue': t.work,
    };
    admin.sendToQueue(t.recorded, Buffer.from('{}'), { headers });
    const { stop } = await recordDeadLetters(client, t.recorded);
    expect(await client.waitForCompletion(batch.id, { timeoutMs: 10_000 })).toMatchObject({ state: 'complete', failed: 1 }); // before: parked as rejected, its item pending
    expect((await client.failures(batch.id)).failures[0]?.error).toBe(`dead-lettered by RabbitMQ (delivery_limit) from queue ${t.work}`);
    await stop();
  });

  it('when a batch is cancelled, then its dead letters are acked and not recorded', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const t = await topology({ 'x-message-ttl': 20 });
    const batch = await produce(client, t.work, 3);
    await client.cancel(batch.id);
    await until(async () => (await count(t.recorded)) === 3, 10_000);
    const { stop } = await recordDeadLetters(client, t.recorded);
    await until(async () => (await count(t.recorded)) === 0, 10_000);
    // Ready counts leave out unacked messages: a stop settles them, where a close would return them to the queue.
    await stop();
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect({ recorded: await count(t.recorded), parked: await count(t.parked) }).toEqual({ recorded: 0, parked: 0 });
    expect(await client.status(batch.id)).toMatchObject({ state: 'cancelled', pending: 3, failed: 0 });
  });

  it('when rollcall refuses the call itself (a wrong baseUrl), then each dead letter goes back as a counted delivery until its queue parks it: no endless loop', async () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const t = await topology({ 'x-message-ttl': 20 });
    const batch = await produce(client, t.work, 2);
    const { channel: recorder, errors } = await recordDeadLetters(new RollcallClient({ baseUrl: `${svc.url}/misrouted` }), t.recorded);
    await until(async () => (await count(t.parked)) === 2, 10_000);
    expect(errors).toEqual(Array(6).fill('not_found')); // 3 deliveries each (x-delivery-limit 2)
    expect(await client.status(batch.id)).toMatchObject({ pending: 2 });
    await recorder.close();
  });

  it("when rollcall refuses the dead-letter consumer's token (401), then its dead letters are held, not given up to the parking queue, and recorded once the token is taken", async () => {
    const right = { token: 'the-right-token-0123456789', tenant: 'a', scopes: ['produce', 'consume', 'read'] };
    const guarded = await startService(backend, { API_TOKENS: JSON.stringify([right]) });
    const warned = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const producer = new RollcallClient({ baseUrl: guarded.url, token: right.token });
      const t = await topology({ 'x-message-ttl': 50 });
      const batch = await produce(producer, t.work, 3);
      await until(async () => (await count(t.recorded)) === 3, 10_000);
      let fixed = false;
      const wrong = 'a-token-the-service-does-not-know';
      const { client, seen } = swappingToken(guarded.url, () => (fixed ? right.token : wrong));
      const { channel: recorder } = await recordDeadLetters(client, t.recorded);
      await until(() => seen.whoami >= 2, 15_000); // refused, and refused again 5 s later
      // The recording queue's x-delivery-limit is 2: three refused records in a row would have parked each.
      expect(await count(t.parked)).toBe(0);
      expect(await producer.status(batch.id)).toMatchObject({ state: 'sealed', pending: 3 });
      fixed = true;
      expect(await producer.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', failed: 3 });
      expect(await count(t.parked)).toBe(0);
      await recorder.close();
    } finally {
      warned.mockRestore();
      await guarded.stop();
    }
  }, 30_000);

  /**
   * Consumes the work queue with rollcallConsumer on a confirm channel, each run of a message noted
   * by its number, through an outage of `outageMs` that gives up each ack after 200 ms; the dead
   * letters are recorded meanwhile. Resolves once the batch is complete, with the runs.
   */
  async function throughAnOutage(
    t: Topology,
    batch: Batch,
    outageMs: number,
    options: RollcallConsumerOptions,
    outage = acksRefusedWhile(svc.url),
  ): Promise<Map<number, number>> {
    const runs = new Map<number, number>();
    // With a channel of its own for the copies, the consumer's may be a plain one.
    const channel = options.copyChannel ? await connection.createChannel() : await connection.createConfirmChannel();
    channel.on('error', () => undefined);
    await channel.prefetch(10);
    const { consumerTag } = await channel.consume(
      t.work,
      rollcallConsumer(outage.client, channel, (message) => void runs.set(numberOf(message), (runs.get(numberOf(message)) ?? 0) + 1), {
        retryForMs: 200,
        ...options,
      }),
    );
    const { stop } = await recordDeadLetters(new RollcallClient({ baseUrl: svc.url }), t.recorded);
    await realSleep(outageMs);
    outage.refusing = false;
    await svc.client.waitForCompletion(batch.id, { timeoutMs: 15_000 });
    await channel.cancel(consumerTag);
    await stop();
    await channel.close();
    return runs;
  }

  it('when rollcall is away for several retryForMs after handlers succeed, then with options.queue each message runs once, none is dead-lettered, and every item is recorded succeeded', async () => {
    const t = await topology({ 'x-delivery-limit': 1 });
    const batch = await produce(svc.client, t.work, 4);
    const runs = await throughAnOutage(t, batch, 1_500, { queue: t.work });
    expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 4, failed: 0 });
    expect([...runs.values()]).toEqual([1, 1, 1, 1]); // the copies are only told to rollcall, not run again
    expect(await count(t.kept)).toBe(0); // nothing dead-lettered
  });

  it('when the copies go on a confirm channel of another connection (copyChannel), then the consumer’s own may be a plain one: each message runs once, all succeeded', async () => {
    const t = await topology({ 'x-delivery-limit': 1 });
    const batch = await produce(svc.client, t.work, 4);
    const publishing = await amqp.connect(amqpUrl as string);
    try {
      const runs = await throughAnOutage(t, batch, 1_500, { queue: t.work, copyChannel: await publishing.createConfirmChannel() });
      expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 4, failed: 0 });
      expect([...runs.values()]).toEqual([1, 1, 1, 1]);
    } finally {
      await publishing.close();
    }
  });

  it('when the broker takes a done copy but does not confirm it within copyConfirmTimeoutMs, then onError says copy_failed, the message goes back, and every item is counted once, succeeded', async () => {
    const t = await topology({});
    const batch = await produce(svc.client, t.work, 4);
    const broker = new URL(amqpUrl as string);
    const proxy = new TcpProxy(broker.hostname, Number(broker.port || 5672));
    await proxy.open();
    const publishing = await amqp.connect(`amqp://guest:guest@127.0.0.1:${proxy.port}`);
    publishing.on('error', () => undefined);
    try {
      const copyChannel = await publishing.createConfirmChannel();
      copyChannel.on('error', () => undefined);
      proxy.holdAnswers(); // the copies reach the broker; its confirms never come back
      const errors: string[] = [];
      const onError = (error: Error) => errors.push(`${(error as { code?: string }).code ?? ''}: ${error.message}`);
      const runs = await throughAnOutage(t, batch, 1_000, { queue: t.work, copyChannel, copyConfirmTimeoutMs: 300, onError });
      expect(errors).toContainEqual(expect.stringMatching(/^copy_failed: .*the broker did not confirm the copy within 0\.3 s/));
      expect([...runs.values()].every((n) => n >= 2)).toBe(true); // returned, and run again
      expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 4, failed: 0 });
      // Left in the queue: copies the broker kept but confirmed too late, and returned messages. Either
      // may tell rollcall first; the other is a duplicate, and nothing counts twice.
      const drain = await connection.createConfirmChannel();
      const { consumerTag } = await drain.consume(
        t.work,
        rollcallConsumer(svc.client, drain, () => undefined, { queue: t.work }),
      );
      await until(async () => (await count(t.work)) === 0);
      await drain.cancel(consumerTag);
      await drain.close();
      expect(await svc.client.status(batch.id)).toMatchObject({ succeeded: 4, failed: 0 });
    } finally {
      await proxy.cut();
    }
  });

  it('when copyConfirmTimeoutMs is not a usable number of ms, then the consumer is refused when it is made', async () => {
    const channel = await connection.createConfirmChannel();
    try {
      for (const copyConfirmTimeoutMs of [0, -1, NaN, Infinity, 2 ** 31])
        expect(() => rollcallConsumer(svc.client, channel, () => undefined, { queue: 'work', copyConfirmTimeoutMs })).toThrow(/copyConfirmTimeoutMs must be/);
    } finally {
      await channel.close();
    }
  });

  it('when a message was published with CC to another queue, then its done copy goes to options.queue alone', async () => {
    const t = await topology({ 'x-delivery-limit': 1 });
    const copied = `${t.work}-cc`;
    await admin.assertQueue(copied, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    queues.push(copied);
    const ids: string[] = [];
    const batch = await openBatch(svc.client, { count: 3, enqueue: async (chunk) => void ids.push(...chunk) });
    ids.forEach((id, n) => admin.sendToQueue(t.work, Buffer.from(JSON.stringify({ n })), { headers: { 'x-rollcall-item-id': id }, CC: [copied] }));
    await admin.waitForConfirms();
    await throughAnOutage(t, batch, 1_000, { queue: t.work });
    expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 3 });
    expect(await count(copied)).toBe(3); // the publisher's CC copies, none of the done copies
  });

  it('when rollcall refuses a success’s ack (401), then no done copy is made: the message goes back as a counted delivery and runs again', async () => {
    const t = await topology({});
    const batch = await produce(svc.client, t.work, 4);
    const refused = acksRefusedWhile(svc.url, 401);
    // Each success refused once (its ack's error told), in one call or several: a copy refused again
    // would be copied again without end, where a counted return is ended by the delivery limit.
    let told = 0;
    const runs = await throughAnOutage(t, batch, 1_000, { queue: t.work, onError: () => (refused.refusing = ++told < 4) }, refused);
    expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 4 });
    expect([...runs.values()]).toEqual([2, 2, 2, 2]);
  });

  it('when rollcall is away for several retryForMs after handlers succeed, then without options.queue each runs again, and RabbitMQ before 4.3 counts each return: past the limit, done work is recorded failed', async () => {
    const version = String((connection.connection as unknown as { serverProperties?: { version?: unknown } }).serverProperties?.version ?? '');
    const nackCounts = !/^(4\.([3-9]|\d{2,})|[5-9]|\d{2,})/.test(version); // from 4.3 on a nack counts no delivery
    const t = await topology({ 'x-delivery-limit': 1 });
    const batch = await produce(svc.client, t.work, 4);
    const runs = await throughAnOutage(t, batch, 1_500, {});
    // What options.queue is for: the old way, shown on this RabbitMQ.
    expect([...runs.values()].every((n) => n >= 2)).toBe(true);
    if (nackCounts) expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 0, failed: 4 });
    else expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 4, failed: 0 });
  });

  it('when options.queue names no queue, then each copy comes back unrouted: onError says copy_failed, and the message is returned, not lost', async () => {
    const t = await topology({});
    const batch = await produce(svc.client, t.work, 3);
    const errors: string[] = [];
    const onError = (error: Error) => errors.push(`${(error as { code?: string }).code ?? ''}: ${error.message}`);
    const runs = await throughAnOutage(t, batch, 500, { queue: `${t.work}-misnamed`, onError });
    expect(await svc.client.status(batch.id)).toMatchObject({ state: 'complete', succeeded: 3, failed: 0 });
    expect([...runs.values()].every((n) => n >= 2)).toBe(true); // returned as before, and run again
    expect(errors).toContainEqual(expect.stringMatching(/^copy_failed: .*no queue named ".*-misnamed" took the copy/));
  });

  it('when options.queue is given with a channel without publisher confirms, then the consumer is refused when it is made', async () => {
    const channel = await connection.createChannel();
    try {
      expect(() => rollcallConsumer(svc.client, channel, () => undefined, { queue: 'work' })).toThrow(/needs a channel with publisher confirms/);
      expect(() => rollcallConsumer(svc.client, channel, () => undefined, { queue: '' })).toThrow(RangeError);
    } finally {
      await channel.close();
    }
  });

  it('when a done copy expires in its queue, then the dead-letter consumer records it succeeded; a copy with a mark the token did not make is recorded failed', async () => {
    const t = await topology({ 'x-message-ttl': 50 });
    const ids: string[] = [];
    const batch = await openBatch(svc.client, { count: 2, enqueue: async (chunk) => void ids.push(...chunk) });
    const marks = [doneMarkOf(svc.client, ids[0]!), doneMarkOf(new RollcallClient({ baseUrl: svc.url, token: 'someone-else' }), ids[1]!)];
    ids.forEach((id, n) => admin.sendToQueue(t.work, Buffer.from(JSON.stringify({ n })), { headers: { 'x-rollcall-item-id': id, [DONE_HEADER]: marks[n] } }));
    await admin.waitForConfirms();
    const { stop } = await recordDeadLetters(svc.client, t.recorded);
    expect(await svc.client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', succeeded: 1, failed: 1 });
    expect(await svc.client.item(ids[0]!)).toMatchObject({ state: 'succeeded' });
    await stop();
  });

  it('when the dead-letter consumer has options.queue and rollcall is away past retryForMs, then its own done copies (no death headers) come back to it and are recorded succeeded', async () => {
    const t = await topology({ 'x-message-ttl': 50 });
    const ids: string[] = [];
    const batch = await openBatch(svc.client, { count: 3, enqueue: async (chunk) => void ids.push(...chunk) });
    ids.forEach((id, n) =>
      admin.sendToQueue(t.work, Buffer.from(JSON.stringify({ n })), { headers: { 'x-rollcall-item-id': id, [DONE_HEADER]: doneMarkOf(svc.client, id) } }),
    );
    await admin.waitForConfirms();
    await until(async () => (await count(t.recorded)) === 3, 10_000);
    const outage = acksRefusedWhile(svc.url);
    const channel = await connection.createConfirmChannel();
    const errors: string[] = [];
    const callback = rollcallDeadLetterConsumer(outage.client, channel, {
      queue: t.recorded,
      retryForMs: 200,
      onError: (error) => errors.push((error as { code?: string }).code ?? error.message),
    });
    const { consumerTag } = await channel.consume(t.recorded, callback);
    await realSleep(1_000); // copies made, taken back, copied again
    outage.refusing = false;
    expect(await svc.client.waitForCompletion(batch.id, { timeoutMs: 15_000 })).toMatchObject({ state: 'complete', succeeded: 3, failed: 0 });
    await channel.cancel(consumerTag);
    await callback.drain();
    await channel.close();
    expect(await count(t.parked)).toBe(0);
    expect(errors).not.toContain('copy_failed');
  });

  it('when reasons is empty or not a list of names, then the consumer is refused when it is made', () => {
    const client = new RollcallClient({ baseUrl: svc.url });
    const channel = { ack: () => undefined, nack: () => undefined };
    expect(() => rollcallDeadLetterConsumer(client, channel, { reasons: [] })).toThrow(RangeError);
    expect(() => rollcallDeadLetterConsumer(client, channel, { reasons: ['delivery-limit' as 'delivery_limit'] })).toThrow(RangeError);
    expect(() => rollcallDeadLetterConsumer(client, channel, { reasons: 'expired' as never })).toThrow(RangeError);
  });
});
