import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

const TOKENS = JSON.stringify([
  { token: 'acme-reader-0123456789', tenant: 'acme', scopes: ['read'] },
  { token: 'acme-worker-0123456789', tenant: 'acme', scopes: ['consume'] },
  { token: 'acme-producer-012345678', tenant: 'acme', scopes: ['produce'] },
  { token: 'other-reader-0123456789', tenant: 'other', scopes: ['read'] },
]);

describe.each(backends())('reading one item (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  it('when an item is pending, succeeded or failed, then GET /v1/items/:itemId says so', async () => {
    const { id, ids } = await batchWith(svc.client, 3);
    await svc.api.post('/v1/acks').send({ ids: [ids[0]] });
    await svc.api.post('/v1/acks').send({ ids: [ids[1]], outcome: 'failed', error: 'boom' });
    const states = await Promise.all(ids.map(async (item) => (await svc.api.get(`/v1/items/${item}`)).body));
    expect(states).toEqual([
      { id: ids[0], batchId: id, state: 'succeeded', batchState: 'sealed' },
      { id: ids[1], batchId: id, state: 'failed', batchState: 'sealed' },
      { id: ids[2], batchId: id, state: 'pending', batchState: 'sealed' },
    ]);
  });

  it('when the ID is malformed, unknown or out of range, then 404 item_not_found', async () => {
    const { id, groups } = await batchWith(svc.client, 2);
    for (const bad of [
      'nope',
      `${id}:${groups[0]!.id}:2`,
      `${id}:${groups[0]!.id}:x`,
      `0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:${groups[0]!.id}:0`,
      `${id}:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:0`,
    ]) {
      const res = await svc.api.get(`/v1/items/${encodeURIComponent(bad)}`);
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('item_not_found');
    }
  });

  it('when a failed ack carries an error, then both forms take it; with succeeded or too long it is 400', async () => {
    const { id, groups, ids } = await batchWith(svc.client, 4);
    expect((await svc.api.post('/v1/acks').send({ ids: [ids[0]], outcome: 'failed', error: 'x'.repeat(1000) })).body.acked).toBe(1);
    // Characters are code points, as the contract and the columns count them: 1,000 emoji fit (2,000 UTF-16 units).
    expect((await svc.api.post('/v1/acks').send({ ids: [ids[3]], outcome: 'failed', error: '\u{1F600}'.repeat(1000) })).body.acked).toBe(1);
    expect(
      (await svc.api.post('/v1/acks').send({ groups: [{ batchId: id, groupId: groups[0]!.id, indexes: [1] }], outcome: 'failed', error: 'e' })).body.acked,
    ).toBe(1);
    for (const body of [
      { ids: [ids[2]], error: 'no outcome means succeeded' },
      { ids: [ids[2]], outcome: 'succeeded', error: 'x' },
      { ids: [ids[2]], outcome: 'failed', error: 'x'.repeat(1001) },
      { ids: [ids[2]], outcome: 'failed', error: '\u{1F600}'.repeat(1001) },
      { ids: [ids[2]], outcome: 'failed', error: 42 },
      { groups: [{ batchId: id, groupId: groups[0]!.id, indexes: [2] }], outcome: 'succeeded', error: 'x' },
    ]) {
      const res = await svc.api.post('/v1/acks').send(body);
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ succeeded: 0, failed: 3, pending: 1 });
    expect((await svc.api.get(`/v1/batches/${id}/failures`)).body.failures.map((f: { error: string }) => f.error)).toContain('\u{1F600}'.repeat(1000));
  });
});

describe.each(backends())('reading one item with tokens (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: TOKENS });
  });
  afterAll(() => svc.stop());

  it('when a reader or consumer asks, then it is answered; a producer-only token 403, another tenant 404', async () => {
    const auth = (token: string) => ({ authorization: `Bearer ${token}` });
    const id = (await svc.api.post('/v1/batches').set(auth('acme-producer-012345678')).send({})).body.id;
    const group = (await svc.api.post(`/v1/batches/${id}/items`).set(auth('acme-producer-012345678')).send({ count: 1 })).body.groups[0].id;
    const item = `${id}:${group}:0`;
    expect((await svc.api.get(`/v1/items/${item}`).set(auth('acme-reader-0123456789'))).status).toBe(200);
    expect((await svc.api.get(`/v1/items/${item}`).set(auth('acme-worker-0123456789'))).body).toMatchObject({ state: 'pending', batchState: 'open' });
    expect((await svc.api.get(`/v1/items/${item}`).set(auth('acme-producer-012345678'))).status).toBe(403);
    const other = await svc.api.get(`/v1/items/${item}`).set(auth('other-reader-0123456789'));
    expect(other.status).toBe(404);
    expect(other.body.error.code).toBe('item_not_found');
  });
});
