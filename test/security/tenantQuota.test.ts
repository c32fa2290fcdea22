import { createRollcall } from '../../src/rollcall';
import { backends, describeEachOrSkip, isPostgresBackend, serverBackends } from '../helpers/backends';
import { until } from '../helpers/realTime';
import { ProxiedService, serve, startBehindProxy, startService, TestApp, TestService } from '../helpers/service';

const TOKENS = ['a', 'b', 'c', 'd', 'e'].map((tenant) => ({ token: `tenant-${tenant}-token-0123456789`, tenant, scopes: ['produce', 'read'] }));
const tokenOf = (tenant: string) => `tenant-${tenant}-token-0123456789`;

/**
 * One tenant must not fill the database every tenant shares: TENANT_MAX_BATCHES bounds its unfinished
 * (open or sealed) batches, TENANT_MAX_ITEMS the items they hold. Past either, an open or add is
 * 429 quota_exceeded and makes nothing; other tenants go on; finished batches free their share.
 */
describeEachOrSkip(backends())('tenant quotas (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), TENANT_MAX_BATCHES: '3', TENANT_MAX_ITEMS: '100' });
  });
  afterAll(() => svc.stop());

  const as = (tenant: string) => ({
    open: () =>
      svc.api
        .post('/v1/batches')
        .set('Authorization', `Bearer ${tokenOf(tenant)}`)
        .send({}),
    add: (batchId: string, count: number, key?: string) => {
      const call = svc.api.post(`/v1/batches/${batchId}/items`).set('Authorization', `Bearer ${tokenOf(tenant)}`);
      return (key === undefined ? call : call.set('Idempotency-Key', key)).send({ count });
    },
    cancel: (batchId: string) => svc.api.post(`/v1/batches/${batchId}/cancel`).set('Authorization', `Bearer ${tokenOf(tenant)}`),
    list: () => svc.api.get('/v1/batches').set('Authorization', `Bearer ${tokenOf(tenant)}`),
  });

  it("then a tenant's open past its unfinished batches is 429 and opens nothing, another tenant's opens go on, and a cancel frees one", async () => {
    const a = as('a');
    const opened = [await a.open(), await a.open(), await a.open()];
    const refused = await a.open();
    const ofB = await as('b').open();

    expect(opened.map((res) => res.status)).toEqual([201, 201, 201]);
    expect([refused.status, refused.body.error?.code, refused.headers['retry-after']]).toEqual([429, 'quota_exceeded', '1']);
    expect(ofB.status).toBe(201);
    expect((await a.list()).body.batches).toHaveLength(3);

    await a.cancel(opened[0]!.body.id);
    await until(async () => (await a.open()).status === 201, 5_000); // at the next read of a's usage, within a second
    expect((await a.list()).body.batches).toHaveLength(4);
    expect((await a.open()).status).toBe(429);
  });

  it("then a tenant's add past its items is 429 and adds nothing, a repeated add counts once, and another tenant's adds go on", async () => {
    const c = as('c');
    const { id } = (await c.open()).body;
    const whole = await c.add(id, 101); // more than the whole quota: no wait would help
    const first = await c.add(id, 30, 'k1');
    const repeated = await c.add(id, 30, 'k1');
    const fills = await c.add(id, 70);
    const past = await c.add(id, 1);
    const ofD = await as('d').add((await as('d').open()).body.id, 100);

    expect([first.status, repeated.status, repeated.body.groups]).toEqual([201, first.status, first.body.groups]);
    expect([whole.status, whole.body.error?.code]).toEqual([400, 'invalid_request']);
    expect(fills.status).toBe(201);
    expect([past.status, past.body.error?.code]).toEqual([429, 'quota_exceeded']);
    expect(ofD.status).toBe(201);
    const batch = await svc.api.get(`/v1/batches/${id}`).set('Authorization', `Bearer ${tokenOf('c')}`);
    expect(batch.body.total).toBe(100);

    await new Promise((resolve) => setTimeout(resolve, 1_100)); // c's usage is read again from the database
    expect((await c.add(id, 1)).status).toBe(429);
    const other = (await c.open()).body.id;
    expect((await c.add(other, 1)).status).toBe(429);
    // At its quota, a repeat of an add (its answer lost, say) is still answered, and a cancelled batch is still 409.
    const again = await c.add(id, 30, 'k1');
    expect([again.status, again.body.groups]).toEqual([first.status, first.body.groups]);
    await c.cancel(other);
    expect((await c.add(other, 1)).body.error?.code).toBe('batch_not_open');
  });

  it("then of a tenant's 20 opens at once, exactly its quota's worth is opened", async () => {
    const e = as('e');
    const answers = await Promise.all(Array.from({ length: 20 }, () => e.open().then((res) => res.status)));
    expect(answers.filter((status) => status === 201)).toHaveLength(3);
    expect(answers.filter((status) => status === 429)).toHaveLength(17);
    expect((await e.list()).body.batches).toHaveLength(3);
  });
});

/** An add still in flight when the tenant's usage is read again: the read cannot see it, the process must. */
describeEachOrSkip(serverBackends())('tenant quotas with an add in flight (%s)', (name, backend) => {
  let app: ProxiedService;
  beforeAll(async () => {
    app = await startBehindProxy(backend, { API_TOKENS: JSON.stringify(TOKENS), TENANT_MAX_ITEMS: '100' });
  });
  afterAll(() => app.stop());

  const asA = (call: ReturnType<ProxiedService['api']['post']>) => call.set('Authorization', `Bearer ${tokenOf('a')}`);

  it("then an add after the next read still counts the first add's items, and is refused", async () => {
    const [one, two] = [(await asA(app.api.post('/v1/batches')).send({})).body.id, (await asA(app.api.post('/v1/batches')).send({})).body.id];
    const hung = app.proxy.freezeEveryConnectionSending(isPostgresBackend(name) ? 'insert into "item_groups"' : 'insert into `item_groups`');
    const first = asA(app.api.post(`/v1/batches/${one}/items`))
      .send({ count: 60 })
      .then((res) => res); // supertest sends on then()
    await hung;
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // the usage is read again for the next add
    const started = performance.now();
    const second = await asA(app.api.post(`/v1/batches/${two}/items`)).send({ count: 60 });
    const secondMs = performance.now() - started;
    app.proxy.speak();

    expect([second.status, second.body.error?.code, secondMs < 1_000]).toEqual([429, 'quota_exceeded', true]);
    expect((await first).status).toBe(201);
  }, 30_000);
});

/**
 * A usage read that hangs (a dead connection) is replaced after 5 s by another; the calls that
 * waited for the first must be checked against the second, never against the usage the first saw
 * late, nor against none when the first lands while the second still runs.
 */
describeEachOrSkip(serverBackends())('tenant quotas when a usage read hangs (%s)', (_name, backend) => {
  let app: ProxiedService;
  let replica: TestApp;
  beforeAll(async () => {
    app = await startBehindProxy(backend, { API_TOKENS: JSON.stringify(TOKENS), TENANT_MAX_BATCHES: '3' });
    replica = await serve(await createRollcall(app.database.config));
  });
  afterAll(async () => {
    await replica.stop();
    await app.stop();
  });

  const openOn = (on: TestApp) =>
    on.api
      .post('/v1/batches')
      .set('Authorization', `Bearer ${tokenOf('a')}`)
      .send({})
      .then((res) => res); // supertest sends on then()
  const usageRead = 'count(*) as batches';

  it('then a call waiting for it starts another after 5 s, and is checked against that one even when the first lands first', async () => {
    const firstRead = app.proxy.freezeConnectionSending(usageRead);
    const waited = openOn(app); // its usage read sees no batch, but its answer is held
    const thawFirst = await firstRead;
    const onReplica = [await openOn(replica), await openOn(replica), await openOn(replica)];
    const secondRead = app.proxy.freezeConnectionSending(usageRead);
    const thawSecond = await secondRead; // the waiting call's own, once the first is overdue: sees the replica's 3 batches, its answer held too
    const joining = openOn(app); // waits for the second read
    await new Promise((resolve) => setTimeout(resolve, 100));
    await thawFirst(); // the overdue read lands first, with no batch
    await new Promise((resolve) => setTimeout(resolve, 100)); // its waiter runs on
    await thawSecond();

    expect(onReplica.map((res) => res.status)).toEqual([201, 201, 201]);
    expect([(await waited).status, (await waited).body.error?.code]).toEqual([429, 'quota_exceeded']);
    expect((await joining).status).toBe(429);
    const listed = await replica.api.get('/v1/batches').set('Authorization', `Bearer ${tokenOf('a')}`);
    expect(listed.body.batches).toHaveLength(3);
  }, 30_000);
});

/** A write whose answer was lost may have been made: its share counts until the next read tells. */
describeEachOrSkip(serverBackends())('tenant quotas when an open is answered 503 after it was made (%s)', (_name, backend) => {
  let app: ProxiedService;
  beforeAll(async () => {
    app = await startBehindProxy(backend, { API_TOKENS: JSON.stringify(TOKENS), TENANT_MAX_BATCHES: '2' });
  });
  afterAll(() => app.stop());

  const open = (userKey = 'any') =>
    app.api
      .post('/v1/batches')
      .set('Authorization', `Bearer ${tokenOf('a')}`)
      .send({ userKey })
      .then((res) => res); // supertest sends on then()

  it('then the next open within the same second is still refused: the tenant never holds more than its quota', async () => {
    expect((await open()).status).toBe(201);
    // The INSERT's value, which PostgreSQL gets in each Bind even where the statement was prepared before.
    const inserting = app.proxy.freezeConnectionSending('answer-lost-here');
    const lost = open('answer-lost-here'); // its INSERT commits (a statement of its own), but its answer is held, then its connection dropped
    await inserting;
    await new Promise((resolve) => setTimeout(resolve, 100)); // the database has run it
    app.proxy.dropFrozen();
    expect((await lost).status).toBe(503);
    const next = await open();

    const listed = await app.api.get('/v1/batches').set('Authorization', `Bearer ${tokenOf('a')}`);
    expect(listed.body.batches).toHaveLength(2);
    expect([next.status, next.body.error?.code]).toEqual([429, 'quota_exceeded']);
  }, 30_000);
});

/** The usage read is for adds that will write: an add to a batch that does not exist or is closed, or a repeat, is answered without it. */
describeEachOrSkip(serverBackends())('tenant quotas, an add that will not write (%s)', (_name, backend) => {
  let app: ProxiedService;
  beforeAll(async () => {
    app = await startBehindProxy(backend, { API_TOKENS: JSON.stringify(TOKENS), TENANT_MAX_ITEMS: '100' });
  });
  afterAll(() => app.stop());

  const asA = <T extends { set(name: string, value: string): T }>(call: T) => call.set('Authorization', `Bearer ${tokenOf('a')}`);
  const addTo = (batchId: string, count: number, key?: string) => {
    const call = asA(app.api.post(`/v1/batches/${batchId}/items`));
    return (key === undefined ? call : call.set('Idempotency-Key', key)).send({ count });
  };

  it('then a 404, a 409 or a keyed repeat is answered while the usage read hangs, and an add to an open batch waits for it', async () => {
    const open = (await asA(app.api.post('/v1/batches')).send({})).body.id as string;
    const complete = (await asA(app.api.post('/v1/batches')).send({})).body.id as string;
    await asA(app.api.post(`/v1/batches/${complete}/seal`)).send({});
    const sealed = (await asA(app.api.post('/v1/batches')).send({})).body.id as string;
    await addTo(sealed, 5);
    await asA(app.api.post(`/v1/batches/${sealed}/seal`)).send({});
    const first = await addTo(open, 10, 'k1');
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // the next add reads the usage again
    const hung = app.proxy.freezeConnectionSending('count(*) as batches');
    const adding = addTo(open, 10).then((res) => res); // supertest sends on then()
    await hung;

    const answers = Promise.all([addTo('00000000-0000-7000-8000-000000000000', 10), addTo(complete, 10), addTo(sealed, 10), addTo(open, 10, 'k1')]);
    const answeredWhileHung = await Promise.race([answers.then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 1_000))]);
    const addedMeanwhile = await Promise.race([adding.then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 200))]);
    app.proxy.speak();
    const [unknown, ofComplete, ofSealed, repeat] = await answers;

    expect(answeredWhileHung).toBe(true);
    expect([unknown.status, ofComplete.status, ofComplete.body.error?.code]).toEqual([404, 409, 'batch_not_open']);
    expect([ofSealed.status, ofSealed.body.error?.code]).toEqual([409, 'batch_not_open']);
    expect([repeat.status, repeat.body]).toEqual([201, first.body]);
    expect(addedMeanwhile).toBe(false);
    expect((await adding).status).toBe(201);
    const status = await asA(app.api.get(`/v1/batches/${open}`));
    expect(status.body.total).toBe(20);
  }, 30_000);
});
