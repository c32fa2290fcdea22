import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

describe.each(backends())('adding items and sealing (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  const open = async () => (await svc.api.post('/v1/batches').send({})).body.id as string;

  it('when 25,000 items are added, then they come back as groups of at most 8,192 that sum to the count', async () => {
    const id = await open();
    const res = await svc.api.post(`/v1/batches/${id}/items`).send({ count: 25_000 });
    expect(res.status).toBe(201);
    expect(res.body.batchId).toBe(id);
    expect(res.body.total).toBe(25_000);
    expect(res.body.groups.map((g: { size: number }) => g.size)).toEqual([8192, 8192, 8192, 424]);
    expect(new Set(res.body.groups.map((g: { id: string }) => g.id)).size).toBe(4);
    const second = await svc.api.post(`/v1/batches/${id}/items`).send({ count: 10 });
    expect(second.body.total).toBe(25_010);
    const batch = (await svc.api.get(`/v1/batches/${id}`)).body;
    expect(batch).toMatchObject({ total: 25_010, pending: 25_010, succeeded: 0, failed: 0, state: 'open' });
  });

  it('when 10,000,000 items are added, then ~1,221 group rows are made and the batch reads in one row', async () => {
    const id = await open();
    const res = await svc.api.post(`/v1/batches/${id}/items`).send({ count: 10_000_000 });
    expect(res.status).toBe(201);
    expect(res.body.groups).toHaveLength(1221);
    const rows = await svc.rollcall.db('item_groups').where('batch_id', id).count({ n: '*' });
    expect(Number(rows[0]!.n)).toBe(1221);
    expect((await svc.api.get(`/v1/batches/${id}`)).body.pending).toBe(10_000_000);
  });

  it.each([
    ['count 0', { count: 0 }],
    ['count over 10,000,000', { count: 10_000_001 }],
    ['a fractional count', { count: 1.5 }],
    ['a count as a string', { count: '5' }],
    ['no count', {}],
  ])('when items are added with %s, then 400 and the total is unchanged', async (_what, body) => {
    const id = await open();
    const res = await svc.api.post(`/v1/batches/${id}/items`).send(body);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await svc.api.get(`/v1/batches/${id}`)).body.total).toBe(0);
  });

  it('when items are added to an unknown batch, then 404 batch_not_found', async () => {
    const res = await svc.api.post('/v1/batches/0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/items').send({ count: 1 });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('batch_not_found');
  });

  it('when items are added to a sealed or complete batch, then 409 batch_not_open', async () => {
    const sealedId = await open();
    await svc.api.post(`/v1/batches/${sealedId}/items`).send({ count: 2 });
    await svc.api.post(`/v1/batches/${sealedId}/seal`);
    const completeId = await open();
    await svc.api.post(`/v1/batches/${completeId}/seal`);
    for (const id of [sealedId, completeId]) {
      const res = await svc.api.post(`/v1/batches/${id}/items`).send({ count: 1 });
      expect(res.status).toBe(409);
      expect(res.body.error.code).toBe('batch_not_open');
    }
    expect((await svc.api.get(`/v1/batches/${sealedId}`)).body.total).toBe(2);
  });

  it('when an add is retried with its Idempotency-Key, then the same groups come back, nothing added', async () => {
    const id = await open();
    const first = await svc.api.post(`/v1/batches/${id}/items`).set('Idempotency-Key', 'add-1').send({ count: 9000 });
    const retry = await svc.api.post(`/v1/batches/${id}/items`).set('Idempotency-Key', 'add-1').send({ count: 9000 });
    expect(retry.status).toBe(201);
    expect(retry.body).toEqual(first.body);
    expect((await svc.api.get(`/v1/batches/${id}`)).body.total).toBe(9000);
    const other = await svc.api.post(`/v1/batches/${id}/items`).set('Idempotency-Key', 'add-2').send({ count: 1 });
    expect(other.body.total).toBe(9001);
  });

  it('when a key is reused with another count, then 409 idempotency_key_reused and nothing is added', async () => {
    const id = await open();
    await svc.api.post(`/v1/batches/${id}/items`).set('Idempotency-Key', 'k').send({ count: 5 });
    const res = await svc.api.post(`/v1/batches/${id}/items`).set('Idempotency-Key', 'k').send({ count: 6 });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('idempotency_key_reused');
    expect((await svc.api.get(`/v1/batches/${id}`)).body.total).toBe(5);
  });

  it('when a batch with zero items is sealed, then it is complete at once with outcome succeeded', async () => {
    const id = await open();
    svc.clock.now += 1000;
    const res = await svc.api.post(`/v1/batches/${id}/seal`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ state: 'complete', outcome: 'succeeded', total: 0, pending: 0 });
    expect(res.body.sealedAt).toBe(res.body.completedAt);
  });

  it('when a batch with pending items is sealed, then it is sealed, and sealing again is a no-op 200', async () => {
    const id = await open();
    await svc.api.post(`/v1/batches/${id}/items`).send({ count: 3 });
    const first = await svc.api.post(`/v1/batches/${id}/seal`).send({ expectedItems: 3 });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ state: 'sealed', outcome: null, pending: 3 });
    expect(first.body.sealedAt).toEqual(expect.any(String));
    svc.clock.now += 1000;
    const again = await svc.api.post(`/v1/batches/${id}/seal`);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
  });

  it('when expectedItems does not match, then 409 expected_items_mismatch and the batch stays open', async () => {
    const id = await open();
    await svc.api.post(`/v1/batches/${id}/items`).send({ count: 3 });
    const res = await svc.api.post(`/v1/batches/${id}/seal`).send({ expectedItems: 4 });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('expected_items_mismatch');
    expect((await svc.api.get(`/v1/batches/${id}`)).body.state).toBe('open');
    expect((await svc.api.post(`/v1/batches/${id}/items`).send({ count: 1 })).status).toBe(201);
  });

  it('when a seal body is malformed or the batch unknown, then 400 or 404', async () => {
    const id = await open();
    expect((await svc.api.post(`/v1/batches/${id}/seal`).send({ expectedItems: -1 })).status).toBe(400);
    expect((await svc.api.post(`/v1/batches/${id}/seal`).send({ expectedItems: 'x' })).status).toBe(400);
    expect((await svc.api.get(`/v1/batches/${id}`)).body.state).toBe('open');
    const missing = await svc.api.post('/v1/batches/0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/seal');
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('batch_not_found');
  });

  it('when a batch is deleted, then 204, it is gone with its groups, and a second delete is 404', async () => {
    const id = await open();
    const add = await svc.api.post(`/v1/batches/${id}/items`).set('Idempotency-Key', 'd').send({ count: 20_000 });
    expect((await svc.api.delete(`/v1/batches/${id}`)).status).toBe(204);
    expect((await svc.api.get(`/v1/batches/${id}`)).status).toBe(404);
    expect(Number((await svc.rollcall.db('item_groups').where('batch_id', id).count({ n: '*' }))[0]!.n)).toBe(0);
    const ack = await svc.api.post('/v1/acks').send({ ids: [`${id}:${add.body.groups[0].id}:0`] });
    expect(ack.body.rejected).toEqual([{ id: `${id}:${add.body.groups[0].id}:0`, reason: 'unknown_batch' }]);
    const again = await svc.api.delete(`/v1/batches/${id}`);
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe('batch_not_found');
  });

  it('when a batch with an add record, a failure reason, a callback event and a child is deleted, then none of its rows is left', async () => {
    const { id } = await batchWith(svc.client, 0, { callbackUrl: 'http://127.0.0.1:9/callback', sealed: false });
    const group = (await svc.api.post(`/v1/batches/${id}/items`).set('Idempotency-Key', 'k').send({ count: 3 })).body.groups[0].id as string;
    await svc.api.post(`/v1/batches/${id}/seal`);
    const parent = { id, ids: [0, 1, 2].map((index) => `${id}:${group}:${index}`) };
    await svc.api.post('/v1/acks').send({ ids: [parent.ids[0]], outcome: 'failed', error: 'disk full' });
    const child = await batchWith(svc.client, 1, { parentItem: parent.ids[1] });
    const rowsOf = async () => {
      const count = async (table: string, column: string) => Number((await svc.rollcall.db(table).where(column, parent.id).count({ n: '*' }))[0]!.n);
      return {
        add_requests: await count('add_requests', 'batch_id'),
        failure_reasons: await count('failure_reasons', 'batch_id'),
        outbox: await count('outbox', 'batch_id'),
        child_links: await count('child_links', 'parent_batch_id'),
      };
    };
    expect(await rowsOf()).toEqual({ add_requests: 1, failure_reasons: 1, outbox: 1, child_links: 1 });
    expect((await svc.api.delete(`/v1/batches/${parent.id}`)).status).toBe(204);
    expect(await rowsOf()).toEqual({ add_requests: 0, failure_reasons: 0, outbox: 0, child_links: 0 });
    expect((await svc.api.get(`/v1/batches/${child.id}`)).body).toMatchObject({ parentItem: parent.ids[1] }); // not cascaded
  });
});

describe.each(backends())('adding items with a small GROUP_SIZE (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { GROUP_SIZE: '8' });
  });
  afterAll(() => svc.stop());

  it('when an add with an Idempotency-Key would make more than 100,000 groups, then it is 400 and adds nothing (409 once the batch is sealed); one of 100,000 groups is answered, and answered again for its key', async () => {
    const id = (await svc.api.post('/v1/batches').send({})).body.id as string;
    const tooMany = await svc.api.post(`/v1/batches/${id}/items`).set('idempotency-key', 'big').send({ count: 800_001 });
    expect([tooMany.status, tooMany.body.error.code]).toEqual([400, 'invalid_request']);
    expect(tooMany.body.error.message).toContain('at most 800000 items');
    expect((await svc.api.get(`/v1/batches/${id}`)).body.total).toBe(0);
    // The batch is looked up first: a missing one is 404, whatever the count.
    const missing = await svc.api.post('/v1/batches/0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/items').set('idempotency-key', 'big').send({ count: 800_001 });
    expect(missing.status).toBe(404);

    // The largest add: its answer (~5.5 MB) is kept whole for the key (MySQL's MEDIUMTEXT, MariaDB's 16 MB packet).
    const added = await svc.api.post(`/v1/batches/${id}/items`).set('idempotency-key', 'big').send({ count: 800_000 });
    expect([added.status, added.body.groups.length]).toEqual([201, 100_000]);
    const again = await svc.api.post(`/v1/batches/${id}/items`).set('idempotency-key', 'big').send({ count: 800_000 });
    expect(again.body).toEqual(added.body);
    expect((await svc.api.get(`/v1/batches/${id}`)).body.total).toBe(800_000);

    // Without a key nothing is kept, and the API's whole range is taken.
    const keyless = await svc.api.post(`/v1/batches/${id}/items`).send({ count: 800_008 });
    expect([keyless.status, keyless.body.groups.length]).toEqual([201, 100_001]);

    // A batch no longer open says so first, as it does for any add.
    await svc.api.post(`/v1/batches/${id}/seal`).send({});
    const sealed = await svc.api.post(`/v1/batches/${id}/items`).set('idempotency-key', 'late').send({ count: 800_001 });
    expect([sealed.status, sealed.body.error.code]).toEqual([409, 'batch_not_open']);
  }, 90_000);
});
