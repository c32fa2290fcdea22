import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';

import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { itemIds, startService, TestService } from '../helpers/service';

/** The headers of the service's own that a generated client would read. */
const SERVICE_HEADERS = ['retry-after', 'x-request-id', 'ratelimit', 'ratelimit-policy', 'rollcall-held-batches'];

type Doc = {
  paths: Record<
    string,
    Record<string, { responses: Record<string, { content?: Record<string, { schema: object }>; headers?: Record<string, { required?: boolean }> }> }>
  >;
  components: { schemas: Record<string, object> };
};

/** Validates a real response body against the document's schema for that path, method and status. */
function validator(doc: Doc) {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema({ $id: 'doc', components: doc.components });
  return (method: string, path: string, status: number, body: unknown, headers: Record<string, unknown> = {}) => {
    const response = doc.paths[path]?.[method]?.responses[String(status)];
    if (!response) throw new Error(`the document has no ${status} for ${method.toUpperCase()} ${path}`);
    // The headers a client reads: each one sent is declared, and each declared required is sent.
    const declared = Object.entries(response.headers ?? {}).map(([name, h]) => [name.toLowerCase(), h.required === true] as const);
    for (const name of SERVICE_HEADERS)
      if (headers[name] !== undefined && !declared.some(([d]) => d === name))
        throw new Error(`${method.toUpperCase()} ${path} ${status} sends ${name}, undeclared`);
    for (const [name, required] of declared)
      if (required && headers[name] === undefined) throw new Error(`${method.toUpperCase()} ${path} ${status} declares ${name} required, not sent`);
    const schema = response.content?.['application/json']?.schema;
    if (!schema) return;
    const rewritten = JSON.parse(JSON.stringify(schema).replaceAll('"#/components', '"doc#/components'));
    const validate = ajv.compile(rewritten);
    if (!validate(body)) throw new Error(`${method.toUpperCase()} ${path} ${status}: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(body)}`);
  };
}

describe.each(backends())('observability (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  it('when the service has worked, then /metrics shows requests, acks, batch events, merges and the pool', async () => {
    const { ids } = await batchWith(svc.client, 3);
    await svc.api.post('/v1/acks').send({ ids: [...ids, ids[0], 'junk'] });
    await svc.api.post('/v1/admin/sweep');
    const res = await svc.api.get('/metrics');
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/plain/);
    const text = res.text;
    expect(text).toMatch(
      /rollcall_http_requests_total\{method="GET",route="\/v1\/batches\/:batchId",status="200"\}|rollcall_http_requests_total\{method="POST",route="\/v1\/batches\/:batchId\/seal",status="200"\} 1/,
    );
    expect(text).toContain('rollcall_ack_items_total{outcome="succeeded",result="acked"} 3');
    expect(text).toContain('rollcall_ack_items_total{outcome="succeeded",result="duplicate"} 1');
    expect(text).toContain('rollcall_ack_items_total{outcome="succeeded",result="rejected"} 1');
    expect(text).toContain('rollcall_batches_total{event="opened"} 1');
    expect(text).toContain('rollcall_batches_total{event="sealed"} 1');
    expect(text).toContain('rollcall_batches_total{event="completed"} 1');
    expect(text).toMatch(/rollcall_group_commit_calls_count \d+/);
    expect(text).toContain('rollcall_sweeper_runs_total 1');
    expect(text).toMatch(/rollcall_db_pool_connections\{state="used",pool="main"\} \d+/);
    // On MySQL/MariaDB the acks run on a pool of their own: it is shown too, with the connections its acks opened.
    const ackPoolFree = /rollcall_db_pool_connections\{state="free",pool="ack"\} (\d+)/.exec(text);
    expect(ackPoolFree === null ? null : Number(ackPoolFree[1]) > 0).toBe(backend.name === 'mysql' ? true : null);
    expect(text).toMatch(/rollcall_http_request_duration_seconds_bucket/);
    expect(text).toMatch(/rollcall_process_resident_memory_bytes \d+/);
    // No callback was ever sent: the series an alert watches are there, at 0.
    expect(text).toContain('rollcall_callback_deliveries_total{result="dead"} 0');
  });

  it('when a client gives up a wait before its answer, then the request is counted, as 499 (client left)', async () => {
    const batch = await batchWith(svc.client, 1);
    const series = /rollcall_http_requests_total\{method="GET",route="\/v1\/batches\/:batchId\/wait",status="499"\} (\d+)/;
    const before = Number(series.exec((await svc.api.get('/metrics')).text)?.[1] ?? 0);
    const leaving = new AbortController();
    const waiting = fetch(`${svc.url}/v1/batches/${batch.id}/wait?timeout=30`, { signal: leaving.signal }).catch(() => 'left');
    await new Promise((resolve) => setTimeout(resolve, 200));
    leaving.abort();
    expect(await waiting).toBe('left');
    for (let tries = 0; tries < 50; tries++) {
      const counted = Number(series.exec((await svc.api.get('/metrics')).text)?.[1] ?? 0);
      if (counted === before + 1) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(series.exec((await svc.api.get('/metrics')).text)?.[1]).toBe(String(before + 1));
  });

  it('when real responses are checked against /openapi.json, then every one of them fits the document', async () => {
    const docRes = await svc.api.get('/openapi.json');
    expect(docRes.status).toBe(200);
    expect(docRes.body.openapi).toBe('3.1.0');
    // Each schema is valid JSON Schema 2020-12, OpenAPI 3.1's (an `$id` with a fragment was not).
    const meta = new Ajv2020({ strict: false });
    addFormats(meta);
    for (const [name, schema] of Object.entries((docRes.body as Doc).components.schemas))
      expect([name, meta.validateSchema(schema), meta.errorsText(meta.errors)]).toEqual([name, true, 'No errors']);
    const check = validator(docRes.body);
    const seen = async (method: string, path: string, res: { status: number; body: unknown; headers: Record<string, unknown> }) => {
      check(method, path, res.status, res.body, res.headers);
      return res;
    };
    const created = await seen(
      'post',
      '/v1/batches',
      await svc.api.post('/v1/batches').send({ userKey: 'doc', metadata: { a: [1] }, callbackUrl: 'http://127.0.0.1:9/x' }),
    );
    const id = (created.body as { id: string }).id;
    await seen('post', '/v1/batches', await svc.api.post('/v1/batches').send({ userKey: 5 }));
    const tooLarge = await seen('post', '/v1/batches', await svc.api.post('/v1/batches').send({ metadata: { big: 'x'.repeat(3_000_000) } }));
    expect(tooLarge.status).toBe(413);
    await seen('get', '/v1/batches/{batchId}', await svc.api.get(`/v1/batches/${id}`));
    await seen('get', '/v1/batches/{batchId}', await svc.api.get('/v1/batches/0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b'));
    const added = await seen('post', '/v1/batches/{batchId}/items', await svc.api.post(`/v1/batches/${id}/items`).send({ count: 5 }));
    await seen('post', '/v1/batches/{batchId}/seal', await svc.api.post(`/v1/batches/${id}/seal`).send({ expectedItems: 4 }));
    await seen('post', '/v1/batches/{batchId}/seal', await svc.api.post(`/v1/batches/${id}/seal`).send({}));
    await seen('post', '/v1/batches/{batchId}/items', await svc.api.post(`/v1/batches/${id}/items`).send({ count: 5 }));
    const ids = itemIds(id, (added.body as { groups: Array<{ id: string; size: number }> }).groups);
    await seen('post', '/v1/acks', await svc.api.post('/v1/acks').send({ ids: [...ids, 'junk', `${id}:${id}:0`] }));
    await seen('post', '/v1/acks', await svc.api.post('/v1/acks').send({ ids: Array(10_001).fill('x') }));
    await seen('get', '/v1/batches', await svc.api.get('/v1/batches?limit=1'));
    const { id: other, ids: otherIds } = await batchWith(svc.client, 3, { sealed: false });
    await seen('post', '/v1/acks', await svc.api.post('/v1/acks').send({ ids: [otherIds[0]], outcome: 'failed', error: 'doc' }));
    await seen('post', '/v1/batches', await svc.api.post('/v1/batches').send({ parentItem: otherIds[1] }));
    await seen('post', '/v1/batches', await svc.api.post('/v1/batches').send({ parentItem: otherIds[1] }));
    await seen('post', '/v1/batches', await svc.api.post('/v1/batches').send({ parentItem: `${other}:${other}:0` }));
    await seen('get', '/v1/batches', await svc.api.get(`/v1/batches?parent=${other}`));
    await seen('get', '/v1/batches/{batchId}/failures', await svc.api.get(`/v1/batches/${other}/failures?limit=1`));
    await seen('get', '/v1/items/{itemId}', await svc.api.get(`/v1/items/${otherIds[0]}`));
    await seen('get', '/v1/items/{itemId}', await svc.api.get('/v1/items/nope'));
    await seen('post', '/v1/batches/{batchId}/cancel', await svc.api.post(`/v1/batches/${other}/cancel`));
    await seen('post', '/v1/batches/{batchId}/cancel', await svc.api.post(`/v1/batches/${id}/cancel`));
    await seen('post', '/v1/acks', await svc.api.post('/v1/acks').send({ ids: otherIds }));
    await seen('get', '/v1/batches/{batchId}/events', await svc.api.get(`/v1/batches/${id}/events`));
    await seen('get', '/v1/batches/{batchId}/wait', await svc.api.get(`/v1/batches/${id}/wait?timeout=0`));
    await seen('post', '/v1/admin/sweep', await svc.api.post('/v1/admin/sweep'));
    await seen('get', '/readyz', await svc.api.get('/readyz'));
    await seen('get', '/healthz', await svc.api.get('/healthz'));
    // The answers every route may give before its own work: each must be in the document too.
    await seen('post', '/v1/batches/{batchId}/seal', await svc.api.post(`/v1/batches/${other}/seal`).send({})); // cancelled: 409
    await seen('post', '/v1/acks', await svc.api.post('/v1/acks').set('content-type', 'text/plain').send('ids'));
    await seen('get', '/v1/whoami', await svc.api.get('/v1/whoami'));
    for (const path of ['/healthz', '/v1/whoami', '/v1/batches', '/dashboard/app.js']) {
      const misdirected = await seen('get', path, await svc.api.get(path).set('host', 'rollcall.example'));
      expect([path, misdirected.status]).toEqual([path, 421]);
    }
    await seen('get', '/dashboard/style.css', await svc.api.get('/dashboard/style.css'));
    await seen('get', '/', await svc.api.get('/').set('range', 'bytes=0-9'));
    // The rate limit's headers, and a 429 with its Retry-After.
    const limited = await startService(backend, { TENANT_RATE_LIMIT: '1' });
    try {
      expect((await seen('get', '/v1/whoami', await limited.api.get('/v1/whoami'))).headers.ratelimit).toBeDefined();
      expect((await seen('get', '/v1/whoami', await limited.api.get('/v1/whoami'))).status).toBe(429);
    } finally {
      await limited.stop();
    }
  });

  it("when a client is generated from /openapi.json, then it learns the query parameters' bounds and defaults and the ack call's limits", async () => {
    const doc = (await svc.api.get('/openapi.json')).body as {
      paths: Record<
        string,
        Record<string, { parameters?: Array<{ name: string; required: boolean; schema: object }>; responses: Record<string, { description: string }> }>
      >;
      components: { schemas: { Ack: { properties: Record<string, { description?: string }> } } };
    };
    const parameter = (path: string, name: string) => doc.paths[path]!.get!.parameters!.find((p) => p.name === name);
    expect(parameter('/v1/batches', 'limit')).toEqual({
      name: 'limit',
      in: 'query',
      required: false,
      schema: { type: 'integer', minimum: 1, maximum: 500, default: 50 },
    });
    expect(parameter('/v1/batches/{batchId}/failures', 'limit')?.schema).toEqual({ type: 'integer', minimum: 1, maximum: 500, default: 50 });
    expect(parameter('/v1/batches/{batchId}/wait', 'timeout')).toMatchObject({
      required: false,
      schema: { type: 'number', minimum: 0, maximum: 60, default: 30 },
    });
    expect(doc.paths['/v1/acks']!.post!.responses['413']!.description).toContain('more than 10,000 IDs');
    expect(doc.components.schemas.Ack.properties.ids!.description).toContain('at most 10,000');
    expect(doc.components.schemas.Ack.properties.error!.description).toContain('only with outcome "failed"');
  });

  it('when metrics are configured private, then they need an admin token', async () => {
    const tokens = JSON.stringify([
      { token: 'admin-token-0123456789', tenant: 'ops', scopes: ['admin'] },
      { token: 'reader-token-012345678', tenant: 'ops', scopes: ['read'] },
    ]);
    const closed = await startService(backend, { API_TOKENS: tokens, PUBLIC_METRICS: 'off' });
    try {
      expect((await closed.api.get('/metrics')).status).toBe(401);
      expect((await closed.api.get('/metrics').set('Authorization', 'Bearer reader-token-012345678')).status).toBe(403);
      const metrics = await closed.api.get('/metrics').set('Authorization', 'Bearer admin-token-0123456789');
      expect(metrics.status).toBe(200);
      // An answer to a token is not kept by a cache on the way, and no answer is sniffed for another type.
      expect(metrics.headers).toMatchObject({ 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
      expect((await closed.api.get('/openapi.json')).status).toBe(200);
      const read = await closed.api.get('/v1/batches').set('Authorization', 'Bearer reader-token-012345678');
      expect(read.headers).toMatchObject({ 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
      expect((await closed.api.get('/v1/nothing-here')).headers).toMatchObject({ 'x-content-type-options': 'nosniff' });
    } finally {
      await closed.stop();
    }
  });
});
