import { Writable } from 'node:stream';

import pino from 'pino';

import { createRollcall } from '../../src/rollcall';
import { Backend, backends, describeEachOrSkip, TestDatabase } from '../helpers/backends';
import { serve, startService, TestApp, TestService } from '../helpers/service';

const TOKENS = ['a', 'b', 'c', 'd'].map((tenant) => ({ token: `tenant-${tenant}-token-0123456789`, tenant, scopes: ['produce', 'read', 'consume'] }));
const tokenOf = (tenant: string) => `tenant-${tenant}-token-0123456789`;

/**
 * A tenant that floods the API (opens, adds and cancels in a loop, or reads without pause) takes
 * every tenant's CPU and database time, and each cancelled batch's rows stay for the retention.
 * TENANT_RATE_LIMIT bounds the requests one tenant sends one process per TENANT_RATE_WINDOW: past
 * it a request is 429 rate_limited, with Retry-After, and does nothing; other tenants go on.
 */
describeEachOrSkip(backends())('a tenant past TENANT_RATE_LIMIT (%s)', (_name, backend) => {
  let svc: TestService;
  let replica: TestApp;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), TENANT_RATE_LIMIT: '5', TENANT_RATE_WINDOW: '60s' });
    replica = await serve(await createRollcall(svc.database.config));
  });
  afterAll(async () => {
    await replica.stop();
    await svc.stop();
  });

  const open = (on: TestApp, tenant: string) =>
    on.api
      .post('/v1/batches')
      .set('Authorization', `Bearer ${tokenOf(tenant)}`)
      .send({})
      .then((res) => res); // supertest sends on then()

  it("then its requests past the limit are 429 and open nothing, while another tenant's go on", async () => {
    const answers = [];
    for (let i = 0; i < 8; i++) answers.push(await open(svc, 'a'));
    const ofB = await open(svc, 'b');
    const listedByA = await replica.api.get('/v1/batches').set('Authorization', `Bearer ${tokenOf('a')}`);

    expect(answers.map((res) => res.status)).toEqual([201, 201, 201, 201, 201, 429, 429, 429]);
    const refused = answers[5]!;
    expect(refused.body).toEqual({ error: { code: 'rate_limited', message: expect.stringContaining('5 requests') } });
    // Until the window ends, not the 1 s of the other 429s.
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(30);
    expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(60);
    expect(answers[0]!.headers['ratelimit']).toMatch(/^limit=5, remaining=4, reset=\d+$/);
    expect(ofB.status).toBe(201);
    // Another process counts its own requests: the refused opens made nothing.
    expect(listedByA.body.batches).toHaveLength(5);
  });

  it('then its reads are refused too, while the routes without a tenant still answer', async () => {
    const read = await svc.api.get('/v1/batches').set('Authorization', `Bearer ${tokenOf('a')}`);
    const acks = await svc.api
      .post('/v1/acks')
      .set('Authorization', `Bearer ${tokenOf('a')}`)
      .send({ ids: ['00000000-0000-7000-8000-000000000000:00000000-0000-7000-8000-000000000000:0'] });

    expect([read.status, read.body.error?.code]).toEqual([429, 'rate_limited']);
    expect([acks.status, acks.body.error?.code]).toEqual([429, 'rate_limited']);
    expect((await svc.api.get('/healthz')).status).toBe(200);
    expect((await svc.api.get('/metrics')).status).toBe(200);
  });
});

describeEachOrSkip(backends())('the requests TENANT_RATE_LIMIT counts (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), TENANT_RATE_LIMIT: '10', TENANT_RATE_WINDOW: '60s' });
  });
  afterAll(() => svc.stop());

  const asC = (call: ReturnType<TestService['api']['get']>) => call.set('Authorization', `Bearer ${tokenOf('c')}`);
  const remaining = (res: { headers: Record<string, string> }) => Number(/remaining=(\d+)/.exec(res.headers['ratelimit'] ?? '')?.[1]);

  it('then each request counts once, whatever its route, and refusals before it do not count', async () => {
    const batch = await asC(svc.api.post('/v1/batches')).send({});
    const ack = await asC(svc.api.post('/v1/acks')).send({ ids: [`${batch.body.id}:00000000-0000-7000-8000-000000000000:0`] });
    const who = await asC(svc.api.get('/v1/whoami'));
    const wait = await asC(svc.api.get(`/v1/batches/${batch.body.id}/wait?timeout=0`));
    const form = await asC(svc.api.post('/v1/acks')).type('form').send('ids=1'); // 415, before the count
    const unknownToken = await svc.api.get('/v1/whoami').set('Authorization', 'Bearer not-a-token-0123456789');
    const after = await asC(svc.api.get('/v1/whoami'));

    expect([batch, ack, who, wait].map(remaining)).toEqual([9, 8, 7, 6]);
    expect([form.status, unknownToken.status]).toEqual([415, 401]);
    expect(remaining(after)).toBe(5);
  });
});

describeEachOrSkip(backends())('a tenant past TENANT_RATE_LIMIT, once the window ends (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), TENANT_RATE_LIMIT: '3', TENANT_RATE_WINDOW: '1s' });
  });
  afterAll(() => svc.stop());

  const list = () => svc.api.get('/v1/batches').set('Authorization', `Bearer ${tokenOf('a')}`);

  /** The first answer with `status` within `limitMs`, timed by the clock (each request takes its time too). */
  async function firstAnswered(status: number, limitMs: number) {
    const deadline = performance.now() + limitMs;
    while (performance.now() < deadline) {
      const res = await list();
      if (res.status === status) return res;
    }
    throw new Error(`no ${status} within ${limitMs} ms`);
  }

  it('then its requests are answered again', async () => {
    await firstAnswered(429, 5_000);
    await firstAnswered(200, 5_000);
  });
});

describeEachOrSkip(backends())('the log of a tenant past TENANT_RATE_LIMIT (%s)', (_name, backend: Backend) => {
  let database: TestDatabase;
  let app: TestApp;
  const lines: Array<{ level: number; msg: string; code?: string; tenant?: string }> = [];
  beforeAll(async () => {
    database = await backend.create({ API_TOKENS: JSON.stringify(TOKENS), TENANT_RATE_LIMIT: '1', TENANT_RATE_WINDOW: '60s' });
    const sink = new Writable({ write: (chunk, _enc, done) => (lines.push(JSON.parse(String(chunk))), done()) });
    app = await serve(await createRollcall(database.config, { log: pino({ level: 'info' }, sink) }));
  });
  afterAll(async () => {
    await app.stop();
    await database.drop();
  });

  it('then its refusals are logged at info once a second, naming the tenant and the limit, not once each', async () => {
    for (let i = 0; i < 21; i++) await app.api.get('/v1/whoami').set('Authorization', `Bearer ${tokenOf('d')}`);

    const refusals = lines.filter((line) => line.msg === 'request answered 429');
    expect(refusals).toHaveLength(1);
    expect(refusals[0]).toMatchObject({ level: 30, code: 'rate_limited', tenant: 'd' });
  });
});

describeEachOrSkip(backends())('a service without TENANT_RATE_LIMIT (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS) });
  });
  afterAll(() => svc.stop());

  it('then a tenant is never refused for its rate, and no rate headers are sent', async () => {
    const answers = await Promise.all(Array.from({ length: 50 }, () => svc.api.get('/v1/batches').set('Authorization', `Bearer ${tokenOf('a')}`)));

    expect(new Set(answers.map((res) => res.status))).toEqual(new Set([200]));
    expect(answers[0]!.headers['ratelimit']).toBeUndefined();
  });
});
