import { Writable } from 'node:stream';

import pino from 'pino';
import request from 'supertest';

import { RollcallClient } from '../../src/client';
import { createServer } from '../../src/http/server';
import { createRollcall, Rollcall } from '../../src/rollcall';
import { backends, TestDatabase } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { listen } from '../helpers/listening';

const TOKENS = [
  { token: 'acme-producer-0123456789', tenant: 'acme', scopes: ['produce', 'read'] },
  { token: 'acme-consumer-0123456789', tenant: 'acme', scopes: ['consume'] },
  { token: 'beta-everything-01234567', tenant: 'beta', scopes: ['produce', 'consume', 'read'] },
  { token: 'ops-admin-token-01234567', tenant: 'ops', scopes: ['admin'] },
];
const [producer, consumer, beta, admin] = TOKENS.map((t) => `Bearer ${t.token}`) as [string, string, string, string];

describe.each(backends())('authentication and tenants (%s)', (_name, backend) => {
  let database: TestDatabase;
  let rollcall: Rollcall;
  let api: ReturnType<typeof request>;
  let server: { url: string; close(): Promise<void> };
  /** The real client with the acme producer's token: batches it makes belong to acme. */
  let acmeProducer: RollcallClient;
  const logLines: string[] = [];

  beforeAll(async () => {
    database = await backend.create({ API_TOKENS: JSON.stringify(TOKENS) });
    const sink = new Writable({ write: (chunk, _enc, done) => (logLines.push(chunk.toString()), done()) });
    rollcall = await createRollcall({ ...database.config, LOG_LEVEL: 'debug' }, { log: pino({ level: 'debug' }, sink) });
    api = request(createServer(rollcall.app));
    server = await listen(rollcall.app);
    acmeProducer = new RollcallClient({ baseUrl: server.url, token: TOKENS[0]!.token });
  });
  afterAll(async () => {
    await server.close();
    await rollcall.close();
    await database.drop();
  });

  it.each([
    ['no Authorization header', undefined],
    ['an unknown token', 'Bearer not-a-known-token-at-all'],
    ['another scheme', `Basic ${TOKENS[0]!.token}`],
  ])('when a request has %s, then 401 unauthorized', async (_what, header) => {
    const req = api.get('/v1/batches');
    const res = header ? await req.set('Authorization', header) : await req;
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('unauthorized');
  });

  it('when a token lacks the scope, then 403 whatever its body: one that is not JSON, or over BODY_LIMIT, is not read for it', async () => {
    const send = (path: string, token: string, body: string) => api.post(path).set('Authorization', token).set('Content-Type', 'application/json').send(body);
    const notJson = await send('/v1/acks', producer, '{"ids": [');
    const tooLarge = await send('/v1/batches', consumer, JSON.stringify({ metadata: { x: 'x'.repeat(3 * 1024 * 1024) } }));
    expect([notJson.status, notJson.body.error.code, tooLarge.status, tooLarge.body.error.code]).toEqual([403, 'forbidden', 403, 'forbidden']); // before: 400 and 413
    const allowed = await send('/v1/acks', consumer, '{"ids": [');
    expect([allowed.status, allowed.body.error.code]).toEqual([400, 'invalid_request']); // a token that may: its body is read
  });

  it('when a token lacks the scope, then 403 forbidden and nothing changes', async () => {
    const res = await api.post('/v1/batches').set('Authorization', consumer).send({});
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('forbidden');
    expect((await api.get('/v1/batches').set('Authorization', consumer)).status).toBe(403);
    expect((await api.post('/v1/admin/sweep').set('Authorization', producer)).status).toBe(403);
    const listed = await api.get('/v1/batches?limit=500').set('Authorization', producer);
    const before = listed.body.batches.length;
    await api.post('/v1/batches').set('Authorization', consumer).send({});
    expect((await api.get('/v1/batches?limit=500').set('Authorization', producer)).body.batches.length).toBe(before);
  });

  it("when a worker asks the client who its token is, then it learns the tenant and scopes, or gets the 401 before any job's ack would", async () => {
    const asConsumer = new RollcallClient({ baseUrl: server.url, token: TOKENS[1]!.token });
    expect(await asConsumer.whoami()).toEqual({ tenant: 'acme', scopes: ['consume'] });
    const unknown = new RollcallClient({ baseUrl: server.url, token: 'not-a-known-token-at-all' });
    await expect(unknown.whoami()).rejects.toMatchObject({ name: 'RollcallApiError', status: 401, code: 'unauthorized' });
  });

  it('when scopes fit, then producers produce, consumers ack, and the admin token may do anything', async () => {
    const { ids } = await batchWith(acmeProducer, 2);
    const ack = await api.post('/v1/acks').set('Authorization', consumer).send({ ids });
    expect(ack.status).toBe(200);
    expect(ack.body.completed).toHaveLength(1);
    expect((await api.post('/v1/admin/sweep').set('Authorization', admin)).status).toBe(200);
  });

  it('when another tenant reads, acks or deletes a batch, then it does not exist for them', async () => {
    const { id, ids } = await batchWith(acmeProducer, 3, { sealed: false });
    expect(
      (
        await api
          .post('/v1/acks')
          .set('Authorization', consumer)
          .send({ ids: [ids[2]], outcome: 'failed', error: 'acme secret' })
      ).status,
    ).toBe(200);
    for (const res of [
      await api.get(`/v1/batches/${id}`).set('Authorization', beta),
      await api.get(`/v1/batches/${id}/failures`).set('Authorization', beta),
      await api.get(`/v1/batches/${id}/wait?timeout=0.2`).set('Authorization', beta),
      await api.post(`/v1/batches/${id}/cancel`).set('Authorization', beta),
      await api.post(`/v1/batches/${id}/seal`).set('Authorization', beta),
      await api.post(`/v1/batches/${id}/items`).set('Authorization', beta).send({ count: 1 }),
      await api.get(`/v1/batches/${id}/wait?timeout=0`).set('Authorization', beta),
      await api.get(`/v1/batches/${id}/events`).set('Authorization', beta),
      await api.delete(`/v1/batches/${id}`).set('Authorization', beta),
    ]) {
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('batch_not_found');
    }
    const ack = await api.post('/v1/acks').set('Authorization', beta).send({ ids });
    expect(ack.body.rejected.map((r: { reason: string }) => r.reason)).toEqual(['unknown_batch', 'unknown_batch', 'unknown_batch']);
    const list = await api.get('/v1/batches?limit=500').set('Authorization', beta);
    expect(list.body.batches.map((b: { id: string }) => b.id)).not.toContain(id);
    const child = await acmeProducer.open({ parentItem: ids[0]! });
    expect((await api.get(`/v1/batches?parentItem=${ids[0]}`).set('Authorization', beta)).body.batches).toEqual([]);
    expect((await acmeProducer.list({ parentItem: ids[0]! })).batches.map((b) => b.id)).toEqual([child.id]);
    expect((await api.get(`/v1/batches?parent=${id}`).set('Authorization', beta)).body).toEqual({ batches: [], nextCursor: null });
    expect((await acmeProducer.list({ parent: id })).batches.map((b) => b.id)).toEqual([child.id]);
    expect((await api.get(`/v1/batches/${id}`).set('Authorization', producer)).body).toMatchObject({ state: 'open', total: 3, succeeded: 0, failed: 1 });
  });

  it('when tokens are configured, then health checks stay open and no token is ever logged', async () => {
    expect((await api.get('/healthz')).status).toBe(200);
    expect((await api.get('/readyz')).status).toBe(200);
    await api.get('/v1/batches').set('Authorization', 'Bearer not-a-known-token-at-all');
    const logs = logLines.join('');
    expect(logs.length).toBeGreaterThan(0);
    for (const t of [...TOKENS.map((x) => x.token), 'not-a-known-token-at-all']) expect(logs).not.toContain(t);
  });
});
