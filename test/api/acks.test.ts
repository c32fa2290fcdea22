import { backends, withCitusForms } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { chunks, shuffled, startService, TestService } from '../helpers/service';

type Group = { id: string; size: number };

describe.each(withCitusForms(backends()))('acking items (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  /** An open batch: these tests seal it themselves, some while acks are under way. */
  const openWith = (count: number) => batchWith(svc.client, count, { sealed: false });

  const ack = (ids: string[], outcome?: string) => svc.api.post('/v1/acks').send(outcome ? { ids, outcome } : { ids });

  it('when 25,000 items are acked in random order with duplicates, then completion is reported once', async () => {
    const { id, ids } = await openWith(25_000);
    expect((await svc.api.post(`/v1/batches/${id}/seal`).send({ expectedItems: 25_000 })).body.state).toBe('sealed');
    const withDuplicates = shuffled([...ids, ...ids.filter((_, i) => i % 10 === 0)], 7);
    let acked = 0;
    let duplicates = 0;
    const completed: unknown[] = [];
    for (const chunk of chunks(withDuplicates, 1000)) {
      const res = await ack(chunk);
      expect(res.status).toBe(200);
      expect(res.body.acked + res.body.duplicates + res.body.rejected.length).toBe(chunk.length);
      acked += res.body.acked;
      duplicates += res.body.duplicates;
      completed.push(...res.body.completed);
    }
    expect(acked).toBe(25_000);
    expect(duplicates).toBe(2_500);
    expect(completed).toHaveLength(1);
    expect(completed[0]).toMatchObject({ id, state: 'complete', outcome: 'succeeded', succeeded: 25_000, failed: 0, pending: 0 });
    const again = await ack(ids.slice(0, 100));
    expect(again.body).toEqual({ acked: 0, duplicates: 100, rejected: [], completed: [] });
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ state: 'complete', succeeded: 25_000, pending: 0 });
  });

  it('when IDs are malformed, unknown, foreign or out of range, then each is rejected with its reason', async () => {
    const a = await openWith(10);
    const b = await openWith(10);
    const [ga] = a.groups as [Group];
    const [gb] = b.groups as [Group];
    const unknownBatch = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';
    const ids = [
      `${a.id}:${ga.id}:0`,
      'not-an-id',
      `${unknownBatch}:${ga.id}:0`,
      `${a.id}:${unknownBatch}:0`,
      `${a.id}:${gb.id}:0`,
      `${a.id}:${ga.id}:10`,
      `${a.id}:${ga.id}:1`,
    ];
    const res = await ack(ids);
    expect(res.status).toBe(200);
    expect(res.body.acked).toBe(2);
    expect(res.body.duplicates).toBe(0);
    expect(res.body.rejected).toEqual(
      expect.arrayContaining([
        { id: 'not-an-id', reason: 'malformed' },
        { id: `${unknownBatch}:${ga.id}:0`, reason: 'unknown_batch' },
        { id: `${a.id}:${unknownBatch}:0`, reason: 'unknown_group' },
        { id: `${a.id}:${gb.id}:0`, reason: 'unknown_group' },
        { id: `${a.id}:${ga.id}:10`, reason: 'index_out_of_range' },
      ]),
    );
    expect(res.body.rejected).toHaveLength(5);
    expect((await svc.api.get(`/v1/batches/${a.id}`)).body).toMatchObject({ succeeded: 2, pending: 8 });
    expect((await svc.api.get(`/v1/batches/${b.id}`)).body).toMatchObject({ succeeded: 0, pending: 10 });
  });

  it('when an ID repeats within one call, then it counts once as acked and its repeats as duplicates', async () => {
    const { id, groups } = await openWith(3);
    const one = `${id}:${groups[0]!.id}:1`;
    const res = await ack([one, one, one]);
    expect(res.body).toMatchObject({ acked: 1, duplicates: 2, rejected: [] });
  });

  it('when items fail and a retry succeeds, then the retry wins and the outcome follows the counts', async () => {
    const { id, ids } = await batchWith(svc.client, 4);
    expect((await ack(ids.slice(0, 2), 'failed')).body).toMatchObject({ acked: 2, duplicates: 0 });
    expect((await ack(ids.slice(0, 1), 'failed')).body).toMatchObject({ acked: 0, duplicates: 1 });
    expect((await ack(ids.slice(0, 1))).body).toMatchObject({ acked: 1, duplicates: 0 });
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ succeeded: 1, failed: 1, pending: 2 });
    expect((await ack(ids.slice(0, 1), 'failed')).body).toMatchObject({ acked: 0, duplicates: 1 });
    const last = await ack(ids.slice(2));
    expect(last.body.completed).toHaveLength(1);
    expect(last.body.completed[0]).toMatchObject({ state: 'complete', outcome: 'failed', succeeded: 3, failed: 1, pending: 0, total: 4 });
  });

  it('when one call holds the last pending item before a retry of a failed one, then the retry counts too (the order of IDs in a call changes nothing)', async () => {
    const { ids } = await batchWith(svc.client, 2);
    expect((await ack([ids[0]!], 'failed')).body).toMatchObject({ acked: 1 });
    const res = await ack([ids[1]!, ids[0]!]);
    expect(res.body).toMatchObject({ acked: 2, duplicates: 0 });
    expect(res.body.completed[0]).toMatchObject({ outcome: 'succeeded', succeeded: 2, failed: 0 });
  });

  it('when every item has an outcome before the seal, then the seal reports the completion, no ack', async () => {
    const { id, ids } = await openWith(5);
    const res = await ack(ids);
    expect(res.body).toMatchObject({ acked: 5, completed: [] });
    const seal = await svc.api.post(`/v1/batches/${id}/seal`);
    expect(seal.body).toMatchObject({ state: 'complete', outcome: 'succeeded', pending: 0 });
  });

  it('when a complete batch is acked again, then every ack is a duplicate, also a retry of a failed item', async () => {
    const { id, ids } = await batchWith(svc.client, 2);
    await ack(ids, 'failed');
    const res = await ack(ids);
    expect(res.body).toEqual({ acked: 0, duplicates: 2, rejected: [], completed: [] });
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ failed: 2, succeeded: 0, outcome: 'failed' });
  });

  it('when one call acks items of several batches, then each batch is counted and each completion reported', async () => {
    const a = await batchWith(svc.client, 3);
    const b = await batchWith(svc.client, 2);
    const res = await ack(shuffled([...a.ids, ...b.ids]));
    expect(res.body.acked).toBe(5);
    expect(res.body.completed.map((x: { id: string }) => x.id).sort()).toEqual([a.id, b.id].sort());
  });

  it.each([
    ['no ids field', {}],
    ['ids that are not strings', { ids: [1, 2] }],
    ['an unknown outcome', { ids: [], outcome: 'maybe' }],
    ['ids as a string', { ids: 'a:b:c' }],
  ])('when the body has %s, then 400 invalid_request', async (_what, body) => {
    const res = await svc.api.post('/v1/acks').send(body);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('when a call carries more than 10,000 IDs, then 413 payload_too_large and nothing is applied', async () => {
    const { id, ids } = await openWith(10_001);
    const res = await ack(ids);
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe('payload_too_large');
    expect((await svc.api.get(`/v1/batches/${id}`)).body.succeeded).toBe(0);
  });

  it('when a call carries more than 10,000 entries, some not IDs at all, then 413 for its size: its entries are not read one by one', async () => {
    const res = await svc.api.post('/v1/acks').send({ ids: [1, ...Array.from({ length: 10_000 }, () => 'x')] });
    expect(res.status).toBe(413);
    expect(res.body.error).toEqual({ code: 'payload_too_large', message: 'an ack call takes at most 10000 items; this one has 10001' });
  });

  it('when the body is over the size limit, then 413 payload_too_large', async () => {
    const res = await svc.api.post('/v1/acks').send({ ids: ['x'.repeat(3 * 1024 * 1024)] });
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe('payload_too_large');
  });

  it('when an empty list is acked, then an empty result comes back', async () => {
    const res = await ack([]);
    expect(res.body).toEqual({ acked: 0, duplicates: 0, rejected: [], completed: [] });
  });
});
