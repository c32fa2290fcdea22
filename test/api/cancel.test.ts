import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { until } from '../helpers/realTime';
import { Receiver } from '../helpers/receiver';
import { itemIds, shuffled, startReplica, startService, TestService } from '../helpers/service';

const DAY = 86_400_000;

/** acked + duplicates + rejected = IDs sent, for every ack result. */
function expectCounted(body: { acked: number; duplicates: number; rejected: unknown[] }, sent: number) {
  expect(body.acked + body.duplicates + body.rejected.length).toBe(sent);
}

describe.each(backends())('cancelling a batch (%s)', (_name, backend) => {
  let svc: TestService;
  let receiver: Receiver;
  beforeAll(async () => {
    receiver = new Receiver();
    await receiver.start();
    svc = await startService(backend, { COMPLETED_RETENTION: '1d', WAIT_POLL_INTERVAL: '50ms' });
  });
  afterAll(async () => {
    await svc.stop();
    await receiver.stop();
  });

  it('when an open batch is cancelled, then it has cancelledAt and its counts; cancelling again is a no-op', async () => {
    const { id, ids } = await batchWith(svc.client, 4);
    await svc.api.post('/v1/acks').send({ ids: [ids[0]] });
    await svc.api.post('/v1/acks').send({ ids: [ids[1]], outcome: 'failed' });
    const res = await svc.api.post(`/v1/batches/${id}/cancel`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      id,
      state: 'cancelled',
      outcome: 'cancelled',
      cancelledAt: new Date(svc.clock.now).toISOString(),
      completedAt: null,
      total: 4,
      succeeded: 1,
      failed: 1,
      pending: 2,
    });
    svc.clock.now += 1000;
    const again = await svc.api.post(`/v1/batches/${id}/cancel`);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(res.body);
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toEqual(res.body);
    expect((await svc.api.get(`/v1/batches?state=cancelled`)).body.batches.map((b: { id: string }) => b.id)).toContain(id);
  });

  it('when cancel or delete carries a body with fields, then 400 and the batch is untouched; an empty body or {} is taken', async () => {
    const { id } = await batchWith(svc.client, 1);
    for (const send of [() => svc.api.post(`/v1/batches/${id}/cancel`), () => svc.api.delete(`/v1/batches/${id}`)]) {
      const res = await send().send({ x: 1 });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    expect((await svc.api.get(`/v1/batches/${id}`)).body.state).toBe('sealed');
    expect((await svc.api.post(`/v1/batches/${id}/cancel`).send({})).status).toBe(200);
    expect((await svc.api.delete(`/v1/batches/${id}`)).status).toBe(204);
  });

  it('when a complete batch is cancelled, then 409 batch_complete; an unknown one is 404', async () => {
    const { id, ids } = await batchWith(svc.client, 1);
    await svc.api.post('/v1/acks').send({ ids });
    const res = await svc.api.post(`/v1/batches/${id}/cancel`);
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('batch_complete');
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ state: 'complete', cancelledAt: null });
    expect((await svc.api.post('/v1/batches/0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/cancel')).status).toBe(404);
  });

  it('when a batch is cancelled, then adds and seals are 409 and acks are rejected as batch_cancelled', async () => {
    const open = (await svc.api.post('/v1/batches').send({})).body.id;
    const added = await svc.api.post(`/v1/batches/${open}/items`).set('Idempotency-Key', 'k1').send({ count: 3 });
    const ids = itemIds(open, added.body.groups);
    const other = await batchWith(svc.client, 2);
    await svc.api.post(`/v1/batches/${open}/cancel`);
    const replay = await svc.api.post(`/v1/batches/${open}/items`).set('Idempotency-Key', 'k1').send({ count: 3 });
    expect([replay.status, replay.body]).toEqual([201, added.body]); // the first answer, nothing added
    for (const [path, body] of [
      [`/v1/batches/${open}/items`, { count: 1 }],
      [`/v1/batches/${open}/seal`, {}],
    ] as const) {
      const res = await svc.api.post(path).send(body);
      expect(res.status).toBe(409);
      expect(res.body.error.code).toBe('batch_not_open');
    }
    const sent = [...ids, ids[0], other.ids[0], `${open}:${added.body.groups[0].id}:9`, 'junk'];
    const ack = await svc.api.post('/v1/acks').send({ ids: sent, outcome: 'failed', error: 'late' });
    expect(ack.status).toBe(200);
    expectCounted(ack.body, sent.length);
    expect(ack.body.acked).toBe(1); // the other batch's item
    expect(ack.body.rejected).toEqual([
      { id: 'junk', reason: 'malformed' },
      ...ids.map((id) => ({ id, reason: 'batch_cancelled' })),
      { id: ids[0], reason: 'batch_cancelled' },
      { id: `${open}:${added.body.groups[0].id}:9`, reason: 'index_out_of_range' },
    ]);
    const compact = await svc.api.post('/v1/acks').send({ groups: [{ batchId: open, groupId: added.body.groups[0].id, indexes: [[0, 2]] }] });
    expect(compact.body).toMatchObject({ acked: 0, duplicates: 0, completed: [] });
    expect(compact.body.rejected.map((r: { reason: string }) => r.reason)).toEqual(['batch_cancelled', 'batch_cancelled', 'batch_cancelled']);
    expect((await svc.api.get(`/v1/batches/${open}`)).body).toMatchObject({
      state: 'cancelled',
      total: 3,
      succeeded: 0,
      failed: 0,
      pending: 3,
      sealedAt: null,
    });
    expect((await svc.api.get(`/v1/items/${ids[0]}`)).body).toMatchObject({ state: 'pending', batchState: 'cancelled' });
  });

  it('when a batch is cancelled while clients wait, then /wait answers at the cancel, on every replica', async () => {
    const replica = await startReplica(svc);
    try {
      const { id } = await batchWith(svc.client, 2);
      const waitHere = svc.api.get(`/v1/batches/${id}/wait?timeout=30`).then((r) => r);
      const waitThere = replica.api.get(`/v1/batches/${id}/wait?timeout=30`).then((r) => r);
      await until(() => svc.rollcall.watcher.waiting === 1 && replica.rollcall.watcher.waiting === 1); // both wait before the cancel
      const started = Date.now();
      await svc.api.post(`/v1/batches/${id}/cancel`);
      for (const res of await Promise.all([waitHere, waitThere])) expect(res.body).toMatchObject({ id, state: 'cancelled', outcome: 'cancelled' });
      expect(Date.now() - started).toBeLessThan(5000);
      expect((await svc.api.get(`/v1/batches/${id}/wait?timeout=30`)).body.state).toBe('cancelled'); // at once
    } finally {
      await replica.stop();
    }
  });

  it('when a batch with a callback URL is cancelled, then one batch.cancelled event is delivered', async () => {
    const { id } = await batchWith(svc.client, 2, { callbackUrl: receiver.url, sealed: false });
    await svc.api.post(`/v1/batches/${id}/cancel`);
    await svc.api.post(`/v1/batches/${id}/cancel`);
    const before = receiver.deliveries.length;
    await svc.rollcall.dispatcher.deliverDue();
    await svc.rollcall.dispatcher.deliverDue();
    const mine = receiver.deliveries.slice(before);
    expect(mine).toHaveLength(1);
    expect(mine[0]!.headers['x-rollcall-event']).toBe('batch.cancelled');
    expect(JSON.parse(mine[0]!.body)).toEqual({
      event: 'batch.cancelled',
      tenant: '',
      batch: expect.objectContaining({ id, state: 'cancelled', outcome: 'cancelled', pending: 2 }),
    });
    expect((await svc.api.get(`/v1/batches/${id}/events`)).body.events).toEqual([expect.objectContaining({ event: 'batch.cancelled', status: 'delivered' })]);
  });

  it('when a cancelled batch is older than COMPLETED_RETENTION, then the sweeper removes it, not before', async () => {
    const { id } = await batchWith(svc.client, 3);
    await svc.api.post(`/v1/batches/${id}/cancel`);
    svc.clock.now += DAY - 1000;
    await svc.api.post('/v1/admin/sweep');
    expect((await svc.api.get(`/v1/batches/${id}`)).status).toBe(200);
    svc.clock.now += 2000;
    await svc.api.post('/v1/admin/sweep');
    expect((await svc.api.get(`/v1/batches/${id}`)).status).toBe(404);
  });

  it('when cancel races the last acks and the seal on two replicas, then one terminal state wins', async () => {
    const replica = await startReplica(svc);
    try {
      const seen = { complete: 0, cancelled: 0 };
      for (let round = 0; round < 12; round++) {
        const { id, ids: inOrder } = await batchWith(svc.client, 40, { callbackUrl: 'http://127.0.0.1:9/never', sealed: false });
        const ids = shuffled(inOrder, round);
        const apis = [svc.api, replica.api];
        type Sent = Promise<{ kind: string; res: import('supertest').Response }>;
        const send =
          (kind: string, api: (typeof apis)[number], path: string, body?: object): (() => Sent) =>
          () =>
            api
              .post(path)
              .send(body ?? {})
              .then((res) => ({ kind, res }));
        const plan: Array<() => Sent> = [];
        for (let i = 0; i < 8; i++) plan.push(send('ack', apis[i % 2]!, '/v1/acks', { ids: ids.slice(i * 5, i * 5 + 5) }));
        plan.splice(round % 8, 0, send('seal', apis[round % 2]!, `/v1/batches/${id}/seal`));
        // Even rounds: a cancel goes out at a different moment each time, first, among the acks, or last.
        if (round % 2 === 0) plan.splice(Math.round((round / 10) * plan.length), 0, send('cancel', apis[(round + 1) % 2]!, `/v1/batches/${id}/cancel`));
        const calls: Sent[] = [];
        for (const start of plan) {
          calls.push(start());
          await new Promise((r) => setImmediate(r));
        }
        // Every round: one more cancel a few milliseconds after the rest; in every fourth round (no
        // early cancel in it) once the rest are answered, so the batch surely completed first.
        if (round % 4 === 3) await Promise.all(calls);
        else await new Promise((r) => setTimeout(r, (round % 4) * 2));
        calls.push(send('cancel', apis[round % 2]!, `/v1/batches/${id}/cancel`)());
        const results = await Promise.all(calls);
        const final = (await svc.api.get(`/v1/batches/${id}`)).body;
        let completions = 0;
        let rejectedAsCancelled = 0;
        for (const { kind, res } of results) {
          if (kind === 'ack') {
            expect(res.status).toBe(200);
            expectCounted(res.body, 5);
            completions += res.body.completed.length;
            rejectedAsCancelled += res.body.rejected.filter((r: { reason: string }) => r.reason === 'batch_cancelled').length;
          } else if (kind === 'seal') {
            // The one seal of the round: answering complete means it made the batch complete.
            if (res.status === 200) completions += res.body.state === 'complete' ? 1 : 0;
            else expect(res.body.error.code).toBe('batch_not_open');
          } else if (final.state === 'complete') {
            // A cancel answered 200 would have told its caller "cancelled" of a batch that completed.
            expect([res.status, res.body.error?.code]).toEqual([409, 'batch_complete']);
          } else {
            expect(res.status).toBe(200);
            expect(res.body.state).toBe('cancelled');
          }
        }
        expect(['complete', 'cancelled']).toContain(final.state);
        // One end event, of the state that won.
        const events = (await svc.api.get(`/v1/batches/${id}/events`)).body.events.map((e: { event: string }) => e.event);
        expect(events).toEqual([final.state === 'complete' ? 'batch.completed' : 'batch.cancelled']);
        seen[final.state as 'complete' | 'cancelled'] += 1;
        if (final.state === 'complete') {
          expect(final).toMatchObject({ outcome: 'succeeded', succeeded: 40, cancelledAt: null });
          expect(completions).toBe(1);
          expect(rejectedAsCancelled).toBe(0);
        } else {
          expect(final).toMatchObject({ outcome: 'cancelled', completedAt: null });
          expect(completions).toBe(0);
          expect(final.succeeded + rejectedAsCancelled).toBe(40);
        }
      }
      console.log(`cancel race (${_name}): ${JSON.stringify(seen)} over 12 rounds`);
      // Both ends were reached: the rounds with a cancel first, and those with it after the rest.
      expect(seen.complete).toBeGreaterThan(0);
      expect(seen.cancelled).toBeGreaterThan(0);
    } finally {
      await replica.stop();
    }
  });
});

describe.each(backends())('cancel with tokens (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, {
      API_TOKENS: JSON.stringify([
        { token: 'acme-producer-012345678', tenant: 'acme', scopes: ['produce'] },
        { token: 'acme-consumer-012345678', tenant: 'acme', scopes: ['consume', 'read'] },
        { token: 'other-producer-01234567', tenant: 'other', scopes: ['produce'] },
      ]),
    });
  });
  afterAll(() => svc.stop());

  it('when a token without produce, or of another tenant, cancels, then 403 or 404 and nothing changes', async () => {
    const auth = (token: string) => ({ authorization: `Bearer ${token}` });
    const id = (await svc.api.post('/v1/batches').set(auth('acme-producer-012345678')).send({})).body.id;
    expect((await svc.api.post(`/v1/batches/${id}/cancel`).set(auth('acme-consumer-012345678'))).status).toBe(403);
    expect((await svc.api.post(`/v1/batches/${id}/cancel`).set(auth('other-producer-01234567'))).status).toBe(404);
    expect((await svc.api.get(`/v1/batches/${id}`).set(auth('acme-consumer-012345678'))).body.state).toBe('open');
    expect((await svc.api.post(`/v1/batches/${id}/cancel`).set(auth('acme-producer-012345678'))).body.state).toBe('cancelled');
  });
});
