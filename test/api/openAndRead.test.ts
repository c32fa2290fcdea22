import { backends } from '../helpers/backends';
import { startService, TestService } from '../helpers/service';

describe.each(backends())('opening and reading batches (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  it('when a batch is opened, then it is answered 201 with every field of the Batch object', async () => {
    const res = await svc.api.post('/v1/batches').send({ userKey: 'catalog-42', metadata: { a: 1 }, callbackUrl: 'https://example.test/cb' });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/),
      state: 'open',
      outcome: null,
      userKey: 'catalog-42',
      metadata: { a: 1 },
      callbackUrl: 'https://example.test/cb',
      total: 0,
      succeeded: 0,
      failed: 0,
      pending: 0,
      createdAt: '2026-11-21T12:00:00.000Z',
      updatedAt: '2026-11-21T12:00:00.000Z',
      sealedAt: null,
      completedAt: null,
      cancelledAt: null,
      parentItem: null,
    });
    const again = await svc.api.get(`/v1/batches/${res.body.id}`);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(res.body);
  });

  it('when a batch is opened with no body at all, then it is created with nulls', async () => {
    const res = await svc.api.post('/v1/batches');
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ userKey: null, metadata: null, callbackUrl: null });
  });

  it.each([
    ['a userKey over 255 characters', { userKey: 'k'.repeat(256) }],
    ['metadata over 4 KiB', { metadata: { blob: 'x'.repeat(4100) } }],
    ['metadata that is not an object', { metadata: [1, 2] }],
    ['a callbackUrl that is not http(s)', { callbackUrl: 'ftp://example.test/x' }],
    ['a callbackUrl that is not a URL', { callbackUrl: 'not a url' }],
    ['an unknown field', { usrKey: 'typo' }],
  ])('when a batch is opened with %s, then 400 invalid_request and nothing is created', async (_what, body) => {
    const before = await svc.api.get('/v1/batches?limit=500');
    const res = await svc.api.post('/v1/batches').send(body);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: { code: 'invalid_request', message: expect.any(String) } });
    const after = await svc.api.get('/v1/batches?limit=500');
    expect(after.body.batches.length).toBe(before.body.batches.length);
  });

  it('when a batch is opened at the limits (a 255-character userKey, metadata of exactly 4 KiB as JSON), then it is taken whole', async () => {
    const userKey = 'k'.repeat(255);
    const metadata = { blob: 'x'.repeat(4096 - JSON.stringify({ blob: '' }).length) };
    expect(Buffer.byteLength(JSON.stringify(metadata))).toBe(4096);
    const res = await svc.api.post('/v1/batches').send({ userKey, metadata });
    expect([res.status, res.body.userKey, res.body.metadata]).toEqual([201, userKey, metadata]);
    const oneMore = await svc.api.post('/v1/batches').send({ metadata: { blob: `${metadata.blob}x` } });
    expect([oneMore.status, oneMore.body.error?.code]).toEqual([400, 'invalid_request']);
  });

  it('when a userKey is 255 emoji (510 UTF-16 units), then it is taken and found; 256 are 400', async () => {
    const userKey = '\u{1F600}'.repeat(255);
    const res = await svc.api.post('/v1/batches').send({ userKey });
    expect([res.status, res.body.userKey]).toEqual([201, userKey]);
    const found = await svc.api.get(`/v1/batches?userKey=${encodeURIComponent(userKey)}`);
    expect(found.body.batches.map((b: { id: string }) => b.id)).toEqual([res.body.id]);
    const tooLong = await svc.api.post('/v1/batches').send({ userKey: `${userKey}\u{1F600}` });
    expect([tooLong.status, tooLong.body.error?.code]).toEqual([400, 'invalid_request']);
    expect((await svc.api.get(`/v1/batches?userKey=${encodeURIComponent(`${userKey}\u{1F600}`)}`)).status).toBe(400);
  });

  it('when the list is read without a limit, then a page holds 50 batches', async () => {
    for (let i = 0; i < 51; i++) expect((await svc.api.post('/v1/batches').send({ userKey: 'page-of-fifty' })).status).toBe(201);
    const page = await svc.api.get('/v1/batches?userKey=page-of-fifty');
    expect([page.body.batches.length, typeof page.body.nextCursor]).toEqual([50, 'string']);
  });

  it('when the body is not JSON, then 400 invalid_request', async () => {
    const res = await svc.api.post('/v1/batches').set('content-type', 'application/json').send('{not json');
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('when a body is sent that is not JSON, then 400 and nothing is created (found by fuzzing)', async () => {
    const before = (await svc.api.get('/v1/batches?limit=500')).body.batches.length;
    const res = await svc.api.post('/v1/batches').set('content-type', 'application/xml').send('<userKey>x</userKey>');
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await svc.api.get('/v1/batches?limit=500')).body.batches.length).toBe(before);
  });

  it('when a request carries an x-request-id, then the answer echoes it; otherwise it gets one', async () => {
    expect((await svc.api.get('/healthz').set('x-request-id', 'trace-123')).headers['x-request-id']).toBe('trace-123');
    expect((await svc.api.get('/healthz')).headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('when a batch does not exist, then 404 batch_not_found (also for ids that are not UUIDs)', async () => {
    for (const id of ['0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', 'nope']) {
      const res = await svc.api.get(`/v1/batches/${id}`);
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('batch_not_found');
    }
  });

  it('when batches are made in one millisecond, then the list is newest first and stable across pages', async () => {
    const created: string[] = [];
    for (let i = 0; i < 23; i++) created.push((await svc.api.post('/v1/batches').send({ userKey: 'paging' })).body.id);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res: { status: number; body: { batches: Array<{ id: string }>; nextCursor: string | null } } = await svc.api
        .get('/v1/batches')
        .query({ userKey: 'paging', limit: 5, ...(cursor ? { cursor } : {}) });
      expect(res.status).toBe(200);
      seen.push(...res.body.batches.map((b) => b.id));
      cursor = res.body.nextCursor;
    } while (cursor);
    expect(seen).toEqual([...created].reverse());
  });

  it('when the list is filtered by state, then only batches in that state come back', async () => {
    const open = (await svc.api.post('/v1/batches').send({ userKey: 'filter' })).body.id;
    const sealed = (await svc.api.post('/v1/batches').send({ userKey: 'filter' })).body.id;
    await svc.api.post(`/v1/batches/${sealed}/items`).send({ count: 1 });
    await svc.api.post(`/v1/batches/${sealed}/seal`);
    const res = await svc.api.get('/v1/batches').query({ userKey: 'filter', state: 'sealed' });
    expect(res.body.batches.map((b: { id: string }) => b.id)).toEqual([sealed]);
    const opened = await svc.api.get('/v1/batches').query({ userKey: 'filter', state: 'open' });
    expect(opened.body.batches.map((b: { id: string }) => b.id)).toEqual([open]);
    expect(opened.body.nextCursor).toBeNull();
  });

  it.each([
    ['limit over 500', { limit: 501 }],
    ['limit 0', { limit: 0 }],
    ['an unknown state', { state: 'done' }],
    ['a cursor it never gave out', { cursor: 'garbage' }],
    ['an unknown parameter', { colour: 'red' }],
  ])('when the list is asked with %s, then 400 invalid_request', async (_what, query) => {
    const res = await svc.api.get('/v1/batches').query(query);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('when an unknown route is called, then 404 with the error shape', async () => {
    const res = await svc.api.get('/v1/nothing');
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('not_found');
  });

  it.each(['/v1/batches', '/v1/acks', '/healthz'])(
    'when OPTIONS %s is asked (no route takes it), then 404 with the error shape, as any other method no route takes',
    async (path) => {
      const res = await svc.api.options(path);
      expect([res.status, res.body.error?.code, res.headers.allow]).toEqual([404, 'not_found', undefined]);
      expect(res.body.error.message).toBe(`no route for OPTIONS ${path}`);
    },
  );

  it('when the service runs, then /healthz and /readyz answer 200', async () => {
    expect((await svc.api.get('/healthz')).status).toBe(200);
    expect((await svc.api.get('/readyz')).status).toBe(200);
  });

  it('when a newer version has migrated the database, then /readyz answers 503 naming the migration this one does not know', async () => {
    const newer = { name: '9999_from_a_newer_version.ts', batch: 99, migration_time: new Date() };
    await svc.rollcall.db('rollcall_migrations').insert(newer);
    try {
      const res = await svc.api.get('/readyz');
      expect(res.status).toBe(503);
      expect(res.body.error.message).toMatch(/schema is newer than this version of rollcall .*9999_from_a_newer_version/);
    } finally {
      await svc.rollcall.db('rollcall_migrations').where({ name: newer.name }).delete();
    }
    expect((await svc.api.get('/readyz')).status).toBe(200);
  });
});
