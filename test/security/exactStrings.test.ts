import { backends } from '../helpers/backends';
import { startService, TestService } from '../helpers/service';

const TOKENS = [
  { token: 'lower-acme-token-0123456789', tenant: 'acme', scopes: ['produce', 'read', 'consume'] },
  { token: 'upper-acme-token-0123456789', tenant: 'Acme', scopes: ['produce', 'read', 'consume'] },
  { token: 'padded-acme-token-012345678', tenant: 'acme ', scopes: ['produce', 'read', 'consume'] },
];
const [lower, upper, padded] = TOKENS.map((t) => `Bearer ${t.token}`) as [string, string, string];

describe.each(backends())('tenant, userKey and Idempotency-Key compare exactly (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS) });
  });
  afterAll(() => svc.stop());

  it('when tenant acme has batches, then tenants Acme and "acme " list none of them and cannot read them', async () => {
    const secret = await svc.api
      .post('/v1/batches')
      .set('Authorization', lower)
      .send({ metadata: { secret: 1 }, userKey: 'k' });
    expect(secret.status).toBe(201);
    for (const other of [upper, padded]) {
      const listed = await svc.api.get('/v1/batches').set('Authorization', other);
      expect(listed.status).toBe(200);
      expect(listed.body.batches).toEqual([]);
      expect((await svc.api.get('/v1/batches?userKey=k').set('Authorization', other)).body.batches).toEqual([]);
      expect((await svc.api.get(`/v1/batches/${secret.body.id}`).set('Authorization', other)).status).toBe(404);
    }
    expect((await svc.api.get('/v1/batches').set('Authorization', lower)).body.batches.map((b: { id: string }) => b.id)).toEqual([secret.body.id]);
  });

  it.each([
    ['case', 'Catalog', 'catalog'],
    ['trailing spaces', 'a', 'a '],
    ['accents', 'é', 'e'],
    ['a character past the Basic Multilingual Plane', 'key-\u{1F600}', 'key-\u{1F601}'],
  ])('when userKeys differ only in %s, then the userKey filter tells them apart', async (_what, one, other) => {
    const auth = upper;
    const first = (await svc.api.post('/v1/batches').set('Authorization', auth).send({ userKey: one })).body.id as string;
    const second = (await svc.api.post('/v1/batches').set('Authorization', auth).send({ userKey: other })).body.id as string;
    const listOne = await svc.api.get('/v1/batches').query({ userKey: one }).set('Authorization', auth);
    const listOther = await svc.api.get('/v1/batches').query({ userKey: other }).set('Authorization', auth);
    expect(listOne.body.batches.map((b: { id: string }) => b.id)).toEqual([first]);
    expect(listOther.body.batches.map((b: { id: string }) => b.id)).toEqual([second]);
  });

  it.each([
    // (HTTP trims a header's surrounding spaces, so a trailing space cannot reach the service.)
    ['case', 'abc', 'ABC'],
    ['accents', 'clé', 'cle'],
    ['sharp s', 'straße', 'strase'],
  ])('when Idempotency-Keys differ only in %s, then the second add adds items of its own', async (_what, one, other) => {
    const id = (await svc.api.post('/v1/batches').set('Authorization', lower).send({})).body.id as string;
    const first = await svc.api.post(`/v1/batches/${id}/items`).set('Authorization', lower).set('Idempotency-Key', one).send({ count: 3 });
    const second = await svc.api.post(`/v1/batches/${id}/items`).set('Authorization', lower).set('Idempotency-Key', other).send({ count: 3 });
    expect([first.status, second.status]).toEqual([201, 201]);
    expect(second.body.total).toBe(6);
    expect(second.body.groups[0].id).not.toBe(first.body.groups[0].id);
    const repeat = await svc.api.post(`/v1/batches/${id}/items`).set('Authorization', lower).set('Idempotency-Key', other).send({ count: 3 });
    expect(repeat.body).toEqual(second.body);
    expect((await svc.api.get(`/v1/batches/${id}`).set('Authorization', lower)).body.total).toBe(6);
  });
});

/**
 * Strings the service stores or looks up are ones every backend keeps exactly: PostgreSQL cannot
 * hold U+0000 in text (the insert failed with a 500), and a lone surrogate has no UTF-8 form (each
 * driver stored a replacement character, so two different keys became one).
 */
const NOT_STORABLE = { 'U+0000': 'a\u0000b', 'a lone high surrogate': 'a\ud800', 'a lone low surrogate': '\udc00b' };

describe.each(backends())('strings no backend stores exactly are refused (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  const batchCount = async () => (await svc.api.get('/v1/batches?limit=500')).body.batches.length as number;
  const refusal = { code: 'invalid_request', message: expect.stringContaining('well-formed Unicode without U+0000') };

  it.each(Object.entries(NOT_STORABLE))('when a userKey or callbackUrl holds %s, then 400 and no batch is made', async (_what, text) => {
    const before = await batchCount();
    for (const body of [{ userKey: text }, { callbackUrl: `http://example.com/${text}` }]) {
      const res = await svc.api.post('/v1/batches').send(body);
      expect(res.status).toBe(400);
      expect(res.body.error).toEqual(refusal);
    }
    expect(await batchCount()).toBe(before);
  });

  it('when the list is filtered by a userKey with U+0000, then 400', async () => {
    const res = await svc.api.get('/v1/batches').query({ userKey: 'a\u0000b' });
    expect(res.status).toBe(400);
    expect(res.body.error).toEqual(refusal);
  });

  it.each(Object.entries(NOT_STORABLE))('when a failure reason holds %s, then 400 in either form and the item stays pending', async (_what, text) => {
    const id = (await svc.api.post('/v1/batches').send({})).body.id as string;
    const group = (await svc.api.post(`/v1/batches/${id}/items`).send({ count: 1 })).body.groups[0].id as string;
    for (const body of [
      { ids: [`${id}:${group}:0`], outcome: 'failed', error: text },
      { groups: [{ batchId: id, groupId: group, indexes: [0] }], outcome: 'failed', error: text },
    ]) {
      const res = await svc.api.post('/v1/acks').send(body);
      expect(res.status).toBe(400);
      expect(res.body.error).toEqual(refusal);
    }
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ failed: 0, pending: 1 });
  });

  it('when metadata has a "__proto__" key at the top, then it is kept as a key like any other', async () => {
    const body = '{"metadata":{"__proto__":{"x":1},"a":1}}';
    const created = await svc.api.post('/v1/batches').set('Content-Type', 'application/json').send(body);
    expect(created.status).toBe(201);
    const read = await svc.api.get(`/v1/batches/${created.body.id}`);
    expect(JSON.stringify(read.body.metadata)).toBe('{"__proto__":{"x":1},"a":1}');
  });

  it('when metadata holds a number no double holds (1e400), then 400 and no batch is made, where it was stored as null', async () => {
    const before = await batchCount();
    const res = await svc.api.post('/v1/batches').set('Content-Type', 'application/json').send('{"metadata":{"big":[1,{"n":1e400}]}}');
    expect(res.status).toBe(400);
    expect(res.body.error).toEqual({ code: 'invalid_request', message: expect.stringContaining('1e400') });
    expect(await batchCount()).toBe(before);
  });

  it('when metadata holds U+0000 or a lone surrogate, then it is kept exactly (metadata is stored as JSON text)', async () => {
    const metadata = { nul: 'a\u0000b', high: 'a\ud800', 'key\u0000': 'x' };
    const id = (await svc.api.post('/v1/batches').send({ metadata })).body.id as string;
    expect((await svc.api.get(`/v1/batches/${id}`)).body.metadata).toEqual(metadata);
  });
});
