import fc from 'fast-check';

import { addItemsBody, createBatchBody, sealBody } from '../../src/http/schemas';
import { backends } from '../helpers/backends';
import { startService, TestService } from '../helpers/service';

/** Everything a client could observe or the tables hold, to prove a bad request changed nothing. */
async function snapshot(svc: TestService) {
  const db = svc.rollcall.db;
  const batches = await db('batches').orderBy('id');
  const groups = await db('item_groups').orderBy(['batch_id', 'id']);
  const adds = await db('add_requests').count({ n: '*' });
  const events = await db('outbox').count({ n: '*' });
  const reasons = await db('failure_reasons').count({ n: '*' });
  const childOutcomes = await db('child_outcomes').count({ n: '*' });
  return JSON.stringify({
    batches,
    groups: groups.map((g) => ({ ...g, succeeded_bits: String(g.succeeded_bits?.toString('hex')), failed_bits: String(g.failed_bits?.toString('hex')) })),
    adds,
    events,
    reasons,
    childOutcomes,
  });
}

const junkJson = fc.oneof(
  fc.anything({ maxDepth: 3 }),
  fc.record({ ids: fc.anything({ maxDepth: 2 }) }),
  fc.record({ groups: fc.anything({ maxDepth: 3 }) }),
  fc.record({ count: fc.oneof(fc.double(), fc.string(), fc.integer({ min: -1e9, max: 0 }), fc.integer({ min: 10_000_001 })) }),
  fc.record({ expectedItems: fc.oneof(fc.double({ noInteger: true }), fc.string(), fc.integer({ max: -1 })) }),
  fc.record({ userKey: fc.oneof(fc.integer(), fc.string({ minLength: 256, maxLength: 300 })), metadata: fc.oneof(fc.string(), fc.array(fc.integer())) }),
);
const junkText = fc.oneof(fc.string({ minLength: 1, maxLength: 200 }), fc.constant('{'), fc.constant('{"ids": [1,2'), fc.constant('null'), fc.constant('[]'));
const pathId = fc.oneof(fc.uuid(), fc.string({ minLength: 1, maxLength: 60 }).map(encodeURIComponent), fc.constant('%00'), fc.constant('..'));
const header = fc.oneof(
  fc.string({ maxLength: 300 }).filter((s) => /^[\x20-\x7e]*$/.test(s)),
  fc.constant('x'.repeat(300)),
);

/** Sends any JSON value as a JSON body (supertest itself refuses bare numbers and booleans). */
const withJson = (req: import('supertest').Test, body: unknown) => {
  const text = JSON.stringify(body);
  return text === undefined ? req : req.set('content-type', 'application/json').send(text);
};

/** Judged on what is sent: JSON.stringify drops undefined members, so `{a: undefined}` goes out as `{}`. */
const isValid = (schema: { safeParse(v: unknown): { success: boolean } }, body: unknown) => {
  const wire = JSON.stringify(body);
  return schema.safeParse(wire === undefined ? {} : (JSON.parse(wire) ?? {})).success;
};

describe.each(backends())('fuzzing every endpoint with bad input (%s)', (name, backend) => {
  jest.setTimeout(300_000);
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  it('when thousands of malformed requests arrive, then each is a 4xx error, never 5xx, changing nothing', async () => {
    const id = (await svc.api.post('/v1/batches').send({ userKey: 'fuzz' })).body.id as string;
    const added = await svc.api.post(`/v1/batches/${id}/items`).send({ count: 10 });
    expect(added.status).toBe(201);
    const group = added.body.groups[0].id as string;
    const before = await snapshot(svc);
    // Item IDs that name nothing of this batch that could change: other batches, unknown groups, out of range.
    const strayItem = fc.oneof(
      fc.tuple(fc.uuid(), fc.uuid(), fc.nat(20)).map(([b, g, i]) => `${b}:${g}:${i}`),
      fc.nat(1000).map((i) => `${id}:${group}:${10 + i}`),
      fc.string({ maxLength: 90 }),
    );

    const request = fc.oneof(
      fc.record({ kind: fc.constant('create'), body: junkJson.filter((b) => !isValid(createBatchBody, b)) }),
      fc.record({ kind: fc.constant('items'), target: pathId, body: junkJson.filter((b) => !isValid(addItemsBody, b)), key: header }),
      fc.record({ kind: fc.constant('seal'), target: pathId, body: junkJson.filter((b) => !isValid(sealBody, b)) }),
      fc.record({ kind: fc.constant('acks'), body: junkJson }),
      fc.record({
        kind: fc.constant('raw'),
        path: fc.constantFrom('/v1/acks', '/v1/batches', `/v1/batches/${id}/items`, `/v1/batches/${id}/seal`),
        text: junkText,
        type: fc.constantFrom('application/json', 'text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=latin1'),
      }),
      fc.record({
        kind: fc.constant('read'),
        target: pathId,
        query: fc.dictionary(fc.constantFrom('state', 'limit', 'cursor', 'userKey', 'timeout', 'x', 'parent'), fc.string({ maxLength: 40 })),
      }),
      fc.record({ kind: fc.constant('cancel'), target: pathId, body: fc.oneof(fc.constant(undefined), junkJson) }),
      fc.record({ kind: fc.constant('item'), target: fc.oneof(strayItem.map(encodeURIComponent), pathId) }),
      fc.record({
        kind: fc.constant('failures'),
        target: fc.oneof(pathId, fc.constant(id)),
        query: fc.dictionary(fc.constantFrom('limit', 'cursor', 'x'), fc.string({ maxLength: 40 })),
      }),
      fc.record({
        kind: fc.constant('child'),
        body: fc.record({
          parentItem: fc.oneof(
            strayItem,
            fc.integer(),
            fc.constant(null).map(() => ({})),
          ),
          userKey: fc.oneof(fc.constant(undefined), fc.string({ minLength: 1, maxLength: 10 })),
        }),
      }),
      fc.record({
        kind: fc.constant('ackError'),
        body: fc.record({
          ids: fc.array(strayItem, { maxLength: 5 }),
          outcome: fc.oneof(fc.constant('failed'), fc.constant('succeeded'), fc.constant(undefined), fc.string({ maxLength: 5 })),
          error: fc.oneof(fc.string({ maxLength: 20 }), fc.constant('x'.repeat(1001)), fc.integer(), fc.constant(null)),
        }),
      }),
      // Round 2 shapes: metadata too deep, compact entries without indexes, forms a page could
      // send (also bodiless, also DELETE and the admin sweep), and Hosts a rebinding page would send.
      fc.record({ kind: fc.constant('deep'), depth: fc.integer({ min: 33, max: 4000 }) }),
      fc.record({
        kind: fc.constant('emptyEntry'),
        entries: fc
          .array(
            fc.record({
              batchId: fc.constantFrom(id, 'x'),
              groupId: fc.constantFrom(added.body.groups[0].id as string, 'y'),
              indexes: fc.constantFrom([], [0], [[0, 3]]),
            }),
            { minLength: 1, maxLength: 20 },
          )
          .filter((e) => e.some((x) => x.indexes.length === 0)),
      }),
      fc.record({
        kind: fc.constant('form'),
        method: fc.constantFrom('post', 'delete'),
        path: fc.constantFrom('/v1/batches', `/v1/batches/${id}`, `/v1/batches/${id}/items`, `/v1/batches/${id}/seal`, '/v1/acks', '/v1/admin/sweep'),
        type: fc.constantFrom('text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=zz', 'TEXT/PLAIN;charset=utf-8'),
        text: fc.oneof(fc.constant(''), junkText),
      }),
      fc.record({ kind: fc.constant('host'), host: fc.domain(), path: fc.constantFrom('/v1/batches', `/v1/batches/${id}`, '/') }),
    );
    const runs = name === 'sqlite' ? 10_000 : 3_000;
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        let res;
        switch (r.kind) {
          case 'create':
            res = await withJson(svc.api.post('/v1/batches'), r.body);
            break;
          case 'items':
            res = await withJson(svc.api.post(`/v1/batches/${r.target}/items`).set('Idempotency-Key', r.key), r.body);
            break;
          case 'seal':
            res = await withJson(svc.api.post(`/v1/batches/${r.target}/seal`), r.body);
            break;
          case 'acks':
            res = await withJson(svc.api.post('/v1/acks'), r.body);
            break;
          case 'cancel':
            res = await withJson(svc.api.post(`/v1/batches/${r.target}/cancel`), r.body);
            break;
          case 'item':
            res = await svc.api.get(`/v1/items/${r.target}`);
            break;
          case 'failures':
            res = await svc.api.get(`/v1/batches/${r.target}/failures`).query(r.query);
            break;
          case 'child':
            res = await withJson(svc.api.post('/v1/batches'), r.body);
            break;
          case 'ackError':
            res = await withJson(svc.api.post('/v1/acks'), r.body);
            break;
          case 'raw':
            res = await svc.api.post(r.path).set('content-type', r.type).send(r.text);
            break;
          case 'deep':
            res = await svc.api
              .post('/v1/batches')
              .set('content-type', 'application/json')
              .send(`{"metadata":${'{"a":'.repeat(r.depth)}1${'}'.repeat(r.depth)}}`);
            break;
          case 'emptyEntry':
            res = await withJson(svc.api.post('/v1/acks'), { groups: r.entries });
            break;
          case 'form':
            res = await svc.api[r.method](r.path).set('content-type', r.type).send(r.text);
            break;
          case 'host':
            res = await svc.api.get(r.path).set('host', r.host);
            break;
          default:
            res = await svc.api.get(`/v1/batches/${r.target}`).query(r.query);
        }
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        expect(res.status).toBeLessThan(500);
        if (res.status >= 400) expect(res.body).toEqual({ error: { code: expect.stringMatching(/^[a-z_]+$/), message: expect.any(String) } });
      }),
      { numRuns: runs },
    );
    const after = await snapshot(svc);
    expect(JSON.parse(after).batches.length).toBe(JSON.parse(before).batches.length);
    expect(after).toBe(before);
    console.log(`fuzz (${name}): ${runs} bad requests, statuses ${JSON.stringify(Object.fromEntries(statuses))}; 5xx: 0; state changed: no`);
  });
});
