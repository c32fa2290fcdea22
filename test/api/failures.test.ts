import { createRollcall } from '../../src/rollcall';
import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { serve, startReplica, startService, TestService } from '../helpers/service';

function expectCounted(body: { acked: number; duplicates: number; rejected: unknown[] }, sent: number) {
  expect(body.acked + body.duplicates + body.rejected.length).toBe(sent);
}

describe.each(backends())('failure reasons (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { FAILURE_REASONS_PER_BATCH: '5' });
  });
  afterAll(() => svc.stop());

  const ack = async (body: object, sent: number) => {
    const res = await svc.api.post('/v1/acks').send(body);
    expect(res.status).toBe(200);
    expectCounted(res.body, sent);
    return res.body;
  };
  const failures = async (id: string, query = '') => (await svc.api.get(`/v1/batches/${id}/failures${query}`)).body;
  const storedRows = async (id: string) =>
    Number(((await svc.rollcall.db('failure_reasons').where('batch_id', id).count({ n: '*' })) as Array<{ n: number }>)[0]!.n);

  it('when items fail with an error in either body form, then the batch lists them oldest first', async () => {
    const { id, groups, ids } = await batchWith(svc.client, 6);
    await ack({ ids: [ids[3], ids[1]], outcome: 'failed', error: 'timeout' }, 2);
    svc.clock.now += 1000;
    await ack({ groups: [{ batchId: id, groupId: groups[0]!.id, indexes: [0] }], outcome: 'failed', error: 'disk full' }, 1);
    await ack({ ids: [ids[4]], outcome: 'failed' }, 1); // no reason given: failed, but not listed
    const page = await failures(id);
    const at = (ms: number) => new Date(ms).toISOString();
    expect(page).toEqual({
      failures: [
        { id: ids[1], error: 'timeout', failedAt: at(svc.clock.now - 1000) },
        { id: ids[3], error: 'timeout', failedAt: at(svc.clock.now - 1000) },
        { id: ids[0], error: 'disk full', failedAt: at(svc.clock.now) },
      ],
      nextCursor: null,
      dropped: 0,
    });
    expect((await svc.api.get(`/v1/batches/${id}`)).body.failed).toBe(4);
  });

  it('when an item fails again, then the latest reason wins; when a retry succeeds, it leaves the list', async () => {
    const { id, ids } = await batchWith(svc.client, 3);
    await ack({ ids: [ids[0], ids[1]], outcome: 'failed', error: 'first' }, 2);
    svc.clock.now += 1000;
    const again = await ack({ ids: [ids[0]], outcome: 'failed', error: 'second' }, 1);
    expect(again).toMatchObject({ acked: 0, duplicates: 1 });
    expect((await failures(id)).failures.map((f: { id: string; error: string }) => [f.id, f.error])).toEqual([
      [ids[1], 'first'],
      [ids[0], 'second'],
    ]);
    const retry = await ack({ ids: [ids[0]] }, 1);
    expect(retry).toMatchObject({ acked: 1 });
    expect((await failures(id)).failures.map((f: { id: string }) => f.id)).toEqual([ids[1]]);
    expect(await storedRows(id)).toBe(1);
  });

  it('when a failure with an error names an index past 32 bits, then it is index_out_of_range, and the others of its call are acked', async () => {
    const { id, groups, ids } = await batchWith(svc.client, 2);
    const res = await ack({ ids: [ids[0], `${id}:${groups[0]!.id}:99999999999`], outcome: 'failed', error: 'boom' }, 2);
    expect([res.acked, res.rejected]).toEqual([1, [{ id: `${id}:${groups[0]!.id}:99999999999`, reason: 'index_out_of_range' }]]);
    const compact = await ack({ groups: [{ batchId: id, groupId: groups[0]!.id, indexes: [1, 2 ** 31] }], outcome: 'failed', error: 'boom' }, 2);
    expect([compact.acked, compact.rejected.map((r: { reason: string }) => r.reason)]).toEqual([1, ['index_out_of_range']]);
  });

  it('when more items fail than the cap, then the rest count as dropped; a retry that wins makes room', async () => {
    const { id, groups, ids } = await batchWith(svc.client, 20);
    const res = await ack({ ids: ids.slice(0, 12), outcome: 'failed', error: 'boom' }, 12);
    expect(res.acked).toBe(12);
    let page = await failures(id);
    expect(page.failures).toHaveLength(5);
    expect(page.dropped).toBe(7);
    expect(await storedRows(id)).toBe(5);
    // The same failures acked again (a redelivery) are duplicates, and not dropped a second time.
    const again = await ack({ ids: ids.slice(0, 12), outcome: 'failed', error: 'boom' }, 12);
    expect(again).toMatchObject({ acked: 0, duplicates: 12 });
    page = await failures(id);
    expect([page.dropped, page.failures.length]).toEqual([7, 5]);
    const kept = page.failures.map((f: { id: string }) => f.id);
    await ack({ ids: kept.slice(0, 2) }, 2); // two retries win
    await ack({ groups: [{ batchId: id, groupId: groups[0]!.id, indexes: [[12, 15]] }], outcome: 'failed', error: 'later' }, 4);
    page = await failures(id);
    expect(page.failures.map((f: { error: string }) => f.error)).toEqual(['boom', 'boom', 'boom', 'later', 'later']);
    expect(page.dropped).toBe(9);
    expect(await storedRows(id)).toBe(5);
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ failed: 14, succeeded: 2, pending: 4 });
  });

  it('when 40,000 items fail with an error in calls of 10,000, then storage stays at the cap', async () => {
    const { id, groups } = await batchWith(svc.client, 40_000);
    for (const group of groups) {
      for (let from = 0; from < group.size; from += 10_000) {
        const to = Math.min(group.size, from + 10_000) - 1;
        await ack({ groups: [{ batchId: id, groupId: group.id, indexes: [[from, to]] }], outcome: 'failed', error: 'x'.repeat(1000) }, to - from + 1);
      }
    }
    expect(await storedRows(id)).toBe(5);
    const page = await failures(id);
    expect(page.dropped).toBe(40_000 - 5);
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ state: 'complete', outcome: 'failed', failed: 40_000 });
  });

  it('when the list is paged, then every reason comes once, oldest first, and bad paging input is a 400', async () => {
    const { id, ids } = await batchWith(svc.client, 5);
    for (const item of [ids[4], ids[2], ids[0], ids[3], ids[1]]) {
      svc.clock.now += 10;
      await ack({ ids: [item], outcome: 'failed', error: `e-${item}` }, 1);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { failures: Array<{ id: string }>; nextCursor: string | null } = await failures(id, `?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.failures.length).toBeLessThanOrEqual(2);
      seen.push(...page.failures.map((f) => f.id));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toEqual([ids[4], ids[2], ids[0], ids[3], ids[1]]);
    // A cursor of the right shape whose index no item column holds (PostgreSQL's integer answered 500).
    const pastIndexes = Buffer.from(`f1.1795488728294.${id}.9999999999`).toString('base64url');
    for (const q of ['?limit=501', '?limit=0', '?limit=0x5', '?limit=', '?cursor=nope', '?other=1', `?cursor=${pastIndexes}`]) {
      const res = await svc.api.get(`/v1/batches/${id}/failures${q}`);
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    expect((await svc.api.get('/v1/batches/0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/failures')).status).toBe(404);
  });

  it('when a replica whose clock runs behind fails an item while the list is paged, then a later page lists it', async () => {
    const behind = await serve(await createRollcall(svc.database.config, { now: () => svc.clock.now - 20 }));
    try {
      const { id, ids } = await batchWith(svc.client, 3);
      await ack({ ids: [ids[0]], outcome: 'failed', error: 'first' }, 1);
      svc.clock.now += 10;
      await ack({ ids: [ids[2]], outcome: 'failed', error: 'second' }, 1);
      const first = await failures(id, '?limit=1');
      expect(first.failures.map((f: { id: string }) => f.id)).toEqual([ids[0]]);
      // Its clock reads 10 ms before the first failure: were it stamped so, it would sort before the cursor.
      expect((await behind.api.post('/v1/acks').send({ ids: [ids[1]], outcome: 'failed', error: 'from behind' })).body.acked).toBe(1);
      const rest = await failures(id, `?limit=5&cursor=${first.nextCursor}`);
      expect(rest.failures.map((f: { id: string; error: string }) => [f.id, f.error])).toEqual([
        [ids[2], 'second'],
        [ids[1], 'from behind'],
      ]);
    } finally {
      await behind.stop();
    }
  });

  it('when a complete batch gets more failed acks, then they are duplicates and the list stays', async () => {
    const { id, ids } = await batchWith(svc.client, 2);
    await ack({ ids, outcome: 'failed', error: 'a' }, 2);
    const before = await failures(id);
    const res = await ack({ ids: [...ids, ids[0]], outcome: 'failed', error: 'b' }, 3);
    expect(res).toMatchObject({ acked: 0, duplicates: 3 });
    expect(await failures(id)).toEqual(before);
  });

  it('when clients on two replicas fail items at once, then exactly the cap is kept, the rest dropped', async () => {
    const replica = await startReplica(svc);
    try {
      const { id, ids } = await batchWith(svc.client, 60);
      const calls = Array.from({ length: 30 }, (_, i) =>
        [svc.api, replica.api][i % 2]!.post('/v1/acks').send({ ids: ids.slice(i * 2, i * 2 + 2), outcome: 'failed', error: `e${i}` }),
      );
      const results = await Promise.all(calls);
      for (const res of results) {
        expect(res.status).toBe(200);
        expect(res.body.acked).toBe(2);
      }
      expect(await storedRows(id)).toBe(5);
      expect((await failures(id)).dropped).toBe(55);
      expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ state: 'complete', failed: 60 });
    } finally {
      await replica.stop();
    }
  });
});
