import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { Delivery, Receiver } from '../helpers/receiver';
import { startService, TestService } from '../helpers/service';

const eventOf = (d: Delivery) => d.headers['x-rollcall-event'] as string;

describe.each(backends())('the batch.first_failure event (%s)', (_name, backend) => {
  let svc: TestService;
  let receiver: Receiver;
  beforeEach(async () => {
    receiver = new Receiver();
    await receiver.start();
    svc = await startService(backend, { CALLBACK_BACKOFF_BASE: '1s', CALLBACK_BACKOFF_CAP: '1m', CALLBACK_MAX_AGE: '1h', CALLBACK_TIMEOUT: '5s' });
  });
  afterEach(async () => {
    await svc.stop();
    await receiver.stop();
  });

  const batchWithCallback = (count: number) => batchWith(svc.client, count, { callbackUrl: receiver.url });

  it('when items of a batch fail, then one batch.first_failure names the first failed item and its error', async () => {
    const { id, ids } = await batchWithCallback(4);
    await svc.api.post('/v1/acks').send({ ids: [ids[2]], outcome: 'failed', error: 'out of memory' });
    await svc.api.post('/v1/acks').send({ ids: [ids[2]] }); // the retry wins: no failed item now
    await svc.api.post('/v1/acks').send({ ids: [ids[1], ids[0]], outcome: 'failed', error: 'again' });
    await svc.rollcall.dispatcher.deliverDue();
    expect(receiver.deliveries.map(eventOf)).toEqual(['batch.first_failure']);
    expect(JSON.parse(receiver.deliveries[0]!.body)).toEqual({
      event: 'batch.first_failure',
      tenant: '',
      batch: expect.objectContaining({ id, state: 'sealed', failed: 1, pending: 3 }),
      itemId: ids[2],
      error: 'out of memory',
    });
    await svc.api.post('/v1/acks').send({ ids: [ids[3]] });
    await svc.rollcall.dispatcher.deliverDue();
    expect(receiver.deliveries.map(eventOf)).toEqual(['batch.first_failure', 'batch.completed']);
  });

  it('when the failure has no error, or there is no callback URL, then error is null, or no event', async () => {
    const { ids } = await batchWithCallback(2);
    await svc.api.post('/v1/acks').send({ ids: [ids[0]], outcome: 'failed' });
    const silent = await batchWith(svc.client, 2);
    await svc.api.post('/v1/acks').send({ ids: silent.ids, outcome: 'failed', error: 'x' });
    await svc.rollcall.dispatcher.deliverDue();
    expect(receiver.deliveries).toHaveLength(1);
    expect(JSON.parse(receiver.deliveries[0]!.body)).toMatchObject({ event: 'batch.first_failure', itemId: ids[0], error: null });
    expect((await svc.rollcall.db('outbox').where('batch_id', silent.id).count({ n: '*' })).map((r) => Number(r.n))).toEqual([0]);
  });

  it('when the first_failure is refused twice as the batch completes, then batch.completed waits for it', async () => {
    receiver.script = [500, 503];
    const { id, ids } = await batchWithCallback(3);
    await svc.api.post('/v1/acks').send({ ids: [ids[0]], outcome: 'failed', error: 'e' });
    await svc.api.post('/v1/acks').send({ ids: ids.slice(1) });
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1); // refused; completed may not go yet
    svc.clock.now += 1000;
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1); // refused again
    svc.clock.now += 2000;
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(2); // delivered, then completed
    expect(receiver.deliveries.map(eventOf)).toEqual(['batch.first_failure', 'batch.first_failure', 'batch.first_failure', 'batch.completed']);
    const events = (await svc.api.get(`/v1/batches/${id}/events`)).body.events;
    expect(events.map((e: { event: string; status: string }) => [e.event, e.status])).toEqual([
      ['batch.first_failure', 'delivered'],
      ['batch.completed', 'delivered'],
    ]);
  });

  it('when the first failure completes the batch and the receiver is slow, then first_failure goes first', async () => {
    receiver.script = [{ status: 200, delayMs: 300 }];
    const { ids } = await batchWithCallback(1);
    const ack = await svc.api.post('/v1/acks').send({ ids, outcome: 'failed', error: 'only one' });
    expect(ack.body.completed).toHaveLength(1);
    await svc.rollcall.dispatcher.deliverDue();
    expect(receiver.deliveries.map(eventOf)).toEqual(['batch.first_failure', 'batch.completed']);
    expect(receiver.deliveries[1]!.receivedAt).toBeGreaterThanOrEqual(receiver.deliveries[0]!.answered!.at);
  });

  it('when batch.completed waited behind a first_failure that was given up, then it gets its own retries, not one try', async () => {
    const { id, ids } = await batchWithCallback(2);
    receiver.fallback = 500;
    await svc.api.post('/v1/acks').send({ ids: [ids[0]], outcome: 'failed', error: 'e' });
    await svc.rollcall.dispatcher.deliverDue();
    await svc.api.post('/v1/acks').send({ ids: [ids[1]] }); // batch.completed, held behind the failing first_failure
    svc.clock.now += 3_600_000; // past CALLBACK_MAX_AGE for both: the first_failure's next failure gives it up
    await svc.rollcall.dispatcher.deliverDue();
    const statuses = async () =>
      (await svc.api.get(`/v1/batches/${id}/events`)).body.events.map((e: { event: string; status: string }) => `${e.event} ${e.status}`);
    expect(receiver.deliveries.map(eventOf)).toEqual(['batch.first_failure', 'batch.first_failure', 'batch.completed']);
    expect(await statuses()).toEqual(['batch.first_failure dead', 'batch.completed pending']);
    receiver.fallback = 200; // the receiver is back: the held event's retry reaches it
    svc.clock.now += 60_000;
    await svc.rollcall.dispatcher.deliverDue();
    expect(receiver.deliveries.map(eventOf)).toEqual(['batch.first_failure', 'batch.first_failure', 'batch.completed', 'batch.completed']);
    expect(await statuses()).toEqual(['batch.first_failure dead', 'batch.completed delivered']);
  });

  it('when a batch whose first_failure is dead completes, then batch.completed still goes', async () => {
    receiver.script = [500];
    const { ids } = await batchWithCallback(2);
    await svc.api.post('/v1/acks').send({ ids: [ids[0]], outcome: 'failed', error: 'e' });
    await svc.rollcall.dispatcher.deliverDue();
    svc.clock.now += 3_600_000; // past CALLBACK_MAX_AGE: the next failure gives it up
    receiver.script = [500];
    await svc.rollcall.dispatcher.deliverDue();
    await svc.api.post('/v1/acks').send({ ids: [ids[1]] });
    await svc.rollcall.dispatcher.deliverDue();
    expect(receiver.deliveries.map(eventOf)).toEqual(['batch.first_failure', 'batch.first_failure', 'batch.completed']);
  });
});
