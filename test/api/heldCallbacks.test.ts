import { createRollcall } from '../../src/rollcall';
import { backends, withCitusForms } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { Delivery, Receiver } from '../helpers/receiver';
import { formsOf, serve, startReplica, startService, TestService } from '../helpers/service';

const eventOf = (d: Delivery) => d.headers['x-rollcall-event'] as string;

interface EventView {
  event: string;
  status: string;
  attempts: number;
  nextAttemptAt: number;
}

/**
 * An event held back behind another that backs off (its batch's first_failure, a child's event) waits
 * for that one's next attempt, where operators see it, not due: left due, every read of due events
 * walked past each such event again (CallbackDispatcher.parkHeld).
 */
describe.each(withCitusForms(backends()))('callbacks held back behind a retry (%s)', (_name, backend) => {
  let svc: TestService;
  let receiver: Receiver;
  const LEASE_MS = 5_000 + 5_000; // CALLBACK_TIMEOUT + what the lease adds
  beforeEach(async () => {
    receiver = new Receiver();
    await receiver.start();
    svc = await startService(backend, { CALLBACK_BACKOFF_BASE: '30s', CALLBACK_BACKOFF_CAP: '10m', CALLBACK_MAX_AGE: '1h', CALLBACK_TIMEOUT: '5s' });
  });
  afterEach(async () => {
    await svc.stop();
    await receiver.stop();
  });

  const eventsOf = async (batchId: string): Promise<Record<string, EventView>> => {
    const events = (await svc.api.get(`/v1/batches/${batchId}/events`)).body.events as Array<{
      event: string;
      status: string;
      attempts: number;
      nextAttemptAt: string;
    }>;
    return Object.fromEntries(events.map((e) => [e.event, { ...e, nextAttemptAt: Date.parse(e.nextAttemptAt) }]));
  };

  /** A completed batch whose first_failure was refused once: its batch.completed waits behind it. */
  async function completedBehindRefusedFirstFailure() {
    receiver.script = [500];
    const { id, ids } = await batchWith(svc.client, 2, { callbackUrl: receiver.url });
    await svc.api.post('/v1/acks').send({ ids: [ids[0]], outcome: 'failed', error: 'e' });
    await svc.api.post('/v1/acks').send({ ids: [ids[1]] });
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
    return id;
  }

  it('when batch.completed waits behind a first_failure that backs off, then it waits for that retry, and goes right after it', async () => {
    const id = await completedBehindRefusedFirstFailure();
    const retryAt = (await eventsOf(id))['batch.first_failure']!.nextAttemptAt;
    expect(retryAt).toBeGreaterThan(svc.clock.now + LEASE_MS); // 15 to 30 s away

    expect(await svc.rollcall.dispatcher.parkHeld()).toBe(1);
    const held = (await eventsOf(id))['batch.completed']!;
    expect(held).toMatchObject({ status: 'pending' });
    expect(held.nextAttemptAt).toBeLessThanOrEqual(retryAt);
    expect(held.nextAttemptAt).toBeGreaterThan(retryAt - 5_000);
    expect(await svc.rollcall.dispatcher.parkHeld()).toBe(0); // no longer due

    svc.clock.now = Math.min(held.nextAttemptAt, retryAt - 1);
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(0); // the first_failure is not due yet
    svc.clock.now = retryAt;
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(2);
    expect(receiver.deliveries.map(eventOf)).toEqual(['batch.first_failure', 'batch.first_failure', 'batch.completed']);
  });

  it('when the first_failure is retried within a lease, or is being sent, then batch.completed stays due', async () => {
    const id = await completedBehindRefusedFirstFailure();
    const retryAt = (await eventsOf(id))['batch.first_failure']!.nextAttemptAt;
    svc.clock.now = retryAt - LEASE_MS; // the retry is a lease away: it may be sent any moment from now on
    expect(await svc.rollcall.dispatcher.parkHeld()).toBe(0);
    expect((await eventsOf(id))['batch.completed']!.nextAttemptAt).toBeLessThanOrEqual(svc.clock.now);

    // Claimed by a replica whose CALLBACK_TIMEOUT, and so its lease, is longer than this one's.
    svc.clock.now = retryAt;
    receiver.script = ['hang'];
    const patient = await serve(
      formsOf(svc.database, await createRollcall({ ...svc.database.config, CALLBACK_TIMEOUT: 60_000 }, { now: () => svc.clock.now })),
    );
    try {
      expect(await patient.rollcall.dispatcher.startDue()).toBe(1);
      await receiver.waitFor(2);
      expect(await svc.rollcall.dispatcher.parkHeld()).toBe(0);
      expect((await eventsOf(id))['batch.completed']!.nextAttemptAt).toBeLessThanOrEqual(svc.clock.now);
    } finally {
      await patient.stop();
    }
  });

  it('when a parent completes while a child’s batch.completed backs off, then the parent’s waits for that retry', async () => {
    const parent = await batchWith(svc.client, 1, { callbackUrl: receiver.url });
    const child = await batchWith(svc.client, 1, { callbackUrl: receiver.url, parentItem: parent.ids[0] });
    receiver.script = [500];
    await svc.api.post('/v1/acks').send({ ids: child.ids });
    await svc.rollcall.childOutcomes.deliverDue(); // the child's outcome acks the parent's item
    expect((await svc.api.get(`/v1/batches/${parent.id}`)).body).toMatchObject({ state: 'complete' });
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1); // the child's, refused
    const retryAt = (await eventsOf(child.id))['batch.completed']!.nextAttemptAt;

    expect(await svc.rollcall.dispatcher.parkHeld()).toBe(1);
    const held = (await eventsOf(parent.id))['batch.completed']!;
    expect(held.nextAttemptAt).toBeLessThanOrEqual(retryAt);
    expect(held.nextAttemptAt).toBeGreaterThan(retryAt - 5_000);

    svc.clock.now = retryAt;
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(2);
    const bodies = receiver.deliveries.map((d) => JSON.parse(d.body) as { batch: { id: string } });
    expect(bodies.map((b) => b.batch.id)).toEqual([child.id, child.id, parent.id]);
  });

  it('when the child whose retry a parent’s batch.completed waits for is deleted, then the parent’s goes at once', async () => {
    const { parent, child } = await parentBehindRefusedChild();
    expect(await svc.rollcall.dispatcher.parkHeld()).toBe(1);

    expect((await svc.api.delete(`/v1/batches/${child.id}`)).status).toBe(204);
    expect((await eventsOf(parent.id))['batch.completed']!.nextAttemptAt).toBeLessThanOrEqual(svc.clock.now);
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
    expect(JSON.parse(receiver.deliveries.at(-1)!.body)).toMatchObject({ event: 'batch.completed', batch: { id: parent.id } });
  });

  /** A parent whose child's batch.completed was refused once: the parent's waits behind it. */
  async function parentBehindRefusedChild() {
    const parent = await batchWith(svc.client, 1, { callbackUrl: receiver.url });
    const child = await batchWith(svc.client, 1, { callbackUrl: receiver.url, parentItem: parent.ids[0] });
    receiver.script = [500];
    await svc.api.post('/v1/acks').send({ ids: child.ids });
    await svc.rollcall.childOutcomes.deliverDue();
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
    return { parent, child };
  }

  it('when a grandchild whose retry its parent’s and grandparent’s batch.completed wait for is deleted, then both go at once', async () => {
    const grandparent = await batchWith(svc.client, 1, { callbackUrl: receiver.url });
    const parent = await batchWith(svc.client, 1, { callbackUrl: receiver.url, parentItem: grandparent.ids[0] });
    const child = await batchWith(svc.client, 1, { callbackUrl: receiver.url, parentItem: parent.ids[0] });
    receiver.script = [500];
    await svc.api.post('/v1/acks').send({ ids: child.ids });
    await svc.rollcall.childOutcomes.deliverDue(); // the child's outcome completes the parent, whose outcome completes the grandparent
    await svc.rollcall.childOutcomes.deliverDue();
    expect((await svc.api.get(`/v1/batches/${grandparent.id}`)).body).toMatchObject({ state: 'complete' });
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1); // the child's, refused
    expect(await svc.rollcall.dispatcher.parkHeld()).toBe(1); // the parent's, behind the child's retry
    expect(await svc.rollcall.dispatcher.parkHeld()).toBe(1); // the grandparent's, behind the parent's
    expect((await eventsOf(grandparent.id))['batch.completed']!.nextAttemptAt).toBeGreaterThan(svc.clock.now);

    expect((await svc.api.delete(`/v1/batches/${child.id}`)).status).toBe(204);
    for (const { id } of [parent, grandparent]) expect((await eventsOf(id))['batch.completed']!.nextAttemptAt).toBeLessThanOrEqual(svc.clock.now);
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(2);
    const bodies = receiver.deliveries.slice(-2).map((d) => JSON.parse(d.body) as { batch: { id: string } });
    expect(bodies.map((b) => b.batch.id)).toEqual([parent.id, grandparent.id]);
  });

  it('when a parent completed by hand has a batch.completed that failed, then waits behind its child’s retry, and the child is deleted, then it goes at once', async () => {
    const parent = await batchWith(svc.client, 1, { callbackUrl: receiver.url });
    const child = await batchWith(svc.client, 1, { callbackUrl: receiver.url, parentItem: parent.ids[0] });
    receiver.fallback = 500;
    await svc.api.post('/v1/acks').send({ ids: parent.ids }); // the child given up on
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1); // the parent's, refused: it backs off
    await svc.api.post('/v1/acks').send({ ids: child.ids }); // the child ends after all
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1); // the child's, refused
    // The child's retry far off (as after more refusals); the parent's own retry comes first.
    await svc.rollcall
      .db('outbox')
      .where('batch_id', child.id)
      .update({ next_attempt_at: svc.clock.now + 300_000 });
    svc.clock.now = (await eventsOf(parent.id))['batch.completed']!.nextAttemptAt;
    expect(await svc.rollcall.dispatcher.parkHeld()).toBe(1);
    expect((await eventsOf(parent.id))['batch.completed']).toMatchObject({ attempts: 1 });

    receiver.fallback = 200;
    expect((await svc.api.delete(`/v1/batches/${child.id}`)).status).toBe(204);
    expect((await eventsOf(parent.id))['batch.completed']!.nextAttemptAt).toBeLessThanOrEqual(svc.clock.now);
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
  });

  it('when a parent’s batch.completed backs off from its own refused attempt and a child is deleted, then it keeps its backoff', async () => {
    const parent = await batchWith(svc.client, 1, { callbackUrl: receiver.url });
    const child = await batchWith(svc.client, 1, { callbackUrl: receiver.url, parentItem: parent.ids[0] });
    receiver.fallback = 500;
    await svc.api.post('/v1/acks').send({ ids: parent.ids }); // the child given up on
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1); // refused: it backs off
    // Its retry off the parked events' 5-s grain, as a backoff's almost always is.
    const retryAt = svc.clock.now - (svc.clock.now % 5_000) + 60_001;
    await svc.rollcall.db('outbox').where('batch_id', parent.id).update({ next_attempt_at: retryAt });
    expect((await svc.api.delete(`/v1/batches/${child.id}`)).status).toBe(204);
    expect((await eventsOf(parent.id))['batch.completed']!.nextAttemptAt).toBe(retryAt); // before: due at once, at each child deleted
  });

  it('when a replica parks a grandparent’s event behind a parent’s that another then gives back (its child deleted meanwhile), then the grandparent’s is freed too', async () => {
    const grandparent = await batchWith(svc.client, 1, { callbackUrl: receiver.url });
    const parent = await batchWith(svc.client, 1, { callbackUrl: receiver.url, parentItem: grandparent.ids[0] });
    const child = await batchWith(svc.client, 1, { callbackUrl: receiver.url, parentItem: parent.ids[0] });
    receiver.script = [500];
    await svc.api.post('/v1/acks').send({ ids: child.ids });
    await svc.rollcall.childOutcomes.deliverDue();
    await svc.rollcall.childOutcomes.deliverDue();
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1); // the child's, refused
    const other = await startReplica(svc);
    try {
      // This replica reads the child's retry; the child is deleted; it parks the parent's event; the
      // other replica parks the grandparent's behind it; this one reads again and gives the parent's back.
      const dispatcher = svc.rollcall.dispatcher as unknown as { heldByTime: (...args: unknown[]) => Promise<unknown> };
      const read = dispatcher.heldByTime.bind(dispatcher);
      let reads = 0;
      dispatcher.heldByTime = async (...args: unknown[]) => {
        reads += 1;
        if (reads === 2) expect(await other.rollcall.dispatcher.parkHeld()).toBe(1);
        const byTime = await read(...args);
        if (reads === 1) expect((await svc.api.delete(`/v1/batches/${child.id}`)).status).toBe(204);
        return byTime;
      };
      expect(await svc.rollcall.dispatcher.parkHeld()).toBe(0);
      expect(reads).toBeGreaterThanOrEqual(2); // and one for batch.cancelled events
    } finally {
      await other.stop();
    }
    for (const { id } of [parent, grandparent]) expect((await eventsOf(id))['batch.completed']!.nextAttemptAt).toBeLessThanOrEqual(svc.clock.now);
  });

  it('when the child is deleted after the pass read its retry but before it moved the parent’s batch.completed, then that event is still due at once', async () => {
    const { parent, child } = await parentBehindRefusedChild();
    // The delete lands between the pass's read of the child's retry and its move of the parent's event.
    const dispatcher = svc.rollcall.dispatcher as unknown as { heldByTime: (...args: unknown[]) => Promise<unknown> };
    const read = dispatcher.heldByTime.bind(dispatcher);
    let deleted = false;
    dispatcher.heldByTime = async (...args: unknown[]) => {
      const byTime = await read(...args);
      if (!deleted) {
        deleted = true;
        expect((await svc.api.delete(`/v1/batches/${child.id}`)).status).toBe(204);
      }
      return byTime;
    };
    expect(await svc.rollcall.dispatcher.parkHeld()).toBe(0);
    expect(deleted).toBe(true);
    expect((await eventsOf(parent.id))['batch.completed']!.nextAttemptAt).toBeLessThanOrEqual(svc.clock.now);
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
    expect(JSON.parse(receiver.deliveries.at(-1)!.body)).toMatchObject({ event: 'batch.completed', batch: { id: parent.id } });
  });

  /**
   * `count` batches' rows written straight into the outbox, each a batch.completed due 20 s ago behind
   * a first_failure whose next attempt is `firstFailureAt`.
   */
  async function heldRows(count: number, firstFailureAt: number): Promise<void> {
    const rows = Array.from({ length: count }, (_, i) => {
      const batchId = `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
      const row = { batch_id: batchId, tenant: '', host: 'nowhere.example', url: 'http://nowhere.example/', payload: '{}', status: 'pending', created_at: 0 };
      return [
        {
          ...row,
          id: `10000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
          event: 'batch.first_failure',
          attempts: 1,
          next_attempt_at: firstFailureAt,
        },
        {
          ...row,
          id: `20000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
          event: 'batch.completed',
          attempts: 0,
          next_attempt_at: svc.clock.now - 20_000,
        },
      ];
    }).flat();
    for (let at = 0; at < rows.length; at += 100) await svc.rollcall.db('outbox').insert(rows.slice(at, at + 100));
  }

  it('when many older held events cannot wait yet (their first failures are due), then one behind them that can is still moved', async () => {
    const id = await completedBehindRefusedFirstFailure();
    // 600 older batches, each a batch.completed behind a first_failure due now (waiting for a slot):
    // more than a page of parkHeld's reads, none of which can be moved.
    await heldRows(600, svc.clock.now - 10_000);
    expect(await svc.rollcall.dispatcher.parkHeld()).toBe(1);
    expect((await eventsOf(id))['batch.completed']!.nextAttemptAt).toBeGreaterThan(svc.clock.now);
  });

  it('when two replicas move the same held events at once, then each is moved once, to its first failure’s retry', async () => {
    const retryAt = svc.clock.now + 600_000 + 2_345;
    await heldRows(1_200, retryAt);
    const other = await startReplica(svc);
    try {
      const moved = await Promise.all([svc.rollcall.dispatcher.parkHeld(), other.rollcall.dispatcher.parkHeld()]);
      expect(moved[0] + moved[1]).toBe(1_200);
    } finally {
      await other.stop();
    }
    const completed = await svc.rollcall.db('outbox').where('event', 'batch.completed').select('next_attempt_at');
    expect(new Set(completed.map((row: { next_attempt_at: unknown }) => Number(row.next_attempt_at)))).toEqual(new Set([retryAt - (retryAt % 5_000)]));
  });
});
