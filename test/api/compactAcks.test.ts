import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

describe.each(backends())('acking in the compact form (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  const sealed = (count: number) => batchWith(svc.client, count);

  it('when whole groups are acked as ranges, then every item counts once and the batch completes once', async () => {
    const { id, groups } = await sealed(9000);
    const [g1, g2] = groups as [{ id: string; size: number }, { id: string; size: number }];
    const first = await svc.api.post('/v1/acks').send({ groups: [{ batchId: id, groupId: g1.id, indexes: [[0, 4999], 5000, 5000] }] });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ acked: 5001, duplicates: 1, rejected: [], completed: [] });
    const rest = await svc.api.post('/v1/acks').send({
      groups: [
        { batchId: id, groupId: g1.id, indexes: [[5000, 8191]] },
        { batchId: id, groupId: g2.id, indexes: [[0, 807]] },
      ],
    });
    expect(rest.body).toMatchObject({ acked: 8192 + 808 - 5001, duplicates: 1 });
    expect(rest.body.completed).toEqual([expect.objectContaining({ id, state: 'complete', succeeded: 9000, pending: 0 })]);
  });

  it('when entries name unknown groups or bad indexes, then each item is rejected with its ID', async () => {
    const { id, groups } = await sealed(3);
    const g = groups[0]!.id;
    const unknown = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';
    const res = await svc.api.post('/v1/acks').send({
      outcome: 'failed',
      groups: [
        { batchId: id, groupId: g, indexes: [[1, 4]] },
        { batchId: id, groupId: unknown, indexes: [0] },
        { batchId: 'not-a-uuid', groupId: g, indexes: [0] },
      ],
    });
    expect(res.body.acked).toBe(2);
    expect(res.body.rejected).toEqual([
      { id: `not-a-uuid:${g}:0`, reason: 'malformed' },
      { id: `${id}:${g}:3`, reason: 'index_out_of_range' },
      { id: `${id}:${g}:4`, reason: 'index_out_of_range' },
      { id: `${id}:${unknown}:0`, reason: 'unknown_group' },
    ]);
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ failed: 2, pending: 1 });
  });

  it('when a compact call names more than 10,000 items, then 413 and nothing is applied', async () => {
    const { id, groups } = await sealed(20_000);
    const res = await svc.api.post('/v1/acks').send({
      groups: [
        { batchId: id, groupId: groups[0]!.id, indexes: [[0, 8191]] },
        { batchId: id, groupId: groups[1]!.id, indexes: [[0, 1808]] },
      ],
    });
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe('payload_too_large');
    expect((await svc.api.get(`/v1/batches/${id}`)).body.succeeded).toBe(0);
  });

  it('when a compact call lists more than 10,000 indexes, some not indexes at all, then 413 for its size before they are read', async () => {
    const res = await svc.api.post('/v1/acks').send({ groups: [{ batchId: 'a', groupId: 'b', indexes: [...Array.from({ length: 10_000 }, () => 0), -1] }] });
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe('payload_too_large');
  });

  it('when a body has an empty ids beside a compact call of more than 10,000 entries, then 413 for its size before they are read (before: each read, and 500 past ~200,000)', async () => {
    const res = await svc.api.post('/v1/acks').send({ ids: [], groups: [{ batchId: 'a', groupId: 'b', indexes: Array.from({ length: 10_001 }, () => 'a') }] });
    expect(res.status).toBe(413);
    expect(res.body.error).toEqual({ code: 'payload_too_large', message: 'an ack call takes at most 10000 items; this one has at least 10001' });
  });

  it.each([
    ['both ids and groups', { ids: [], groups: [] }],
    ['a reversed range', { groups: [{ batchId: 'a', groupId: 'b', indexes: [[5, 1]] }] }],
    ['a negative index', { groups: [{ batchId: 'a', groupId: 'b', indexes: [-1] }] }],
    ['a range of three numbers', { groups: [{ batchId: 'a', groupId: 'b', indexes: [[1, 2, 3]] }] }],
    ['an entry without indexes', { groups: [{ batchId: 'a', groupId: 'b' }] }],
  ])('when the compact body has %s, then 400 invalid_request', async (_what, body) => {
    const res = await svc.api.post('/v1/acks').send(body);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });
});
