import { backends } from '../helpers/backends';
import { startService, TestService } from '../helpers/service';

/** JSON text of an object nested `depth` levels deep: {"a":{"a":…{"a":1}}} (as text: too deep to stringify). */
const nested = (depth: number): string => `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;

describe.each(backends())('input limits that protect other callers (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  const count = async () => (await svc.api.get('/v1/batches?limit=500')).body.batches.length as number;

  it('when metadata nests 32 levels, then it is stored; 33 or 5,000 levels are 400 and create nothing', async () => {
    expect(
      (
        await svc.api
          .post('/v1/batches')
          .set('Content-Type', 'application/json')
          .send(`{"metadata":${nested(32)}}`)
      ).status,
    ).toBe(201);
    const before = await count();
    for (const depth of [33, 5000]) {
      const body = `{"metadata":${nested(depth)}}`;
      const res = await svc.api.post('/v1/batches').set('Content-Type', 'application/json').send(body);
      expect(res.status).toBe(400);
      expect(res.body.error).toEqual({ code: 'invalid_request', message: expect.stringContaining('32 levels') });
    }
    expect(await count()).toBe(before);
  });

  it('when a compact ack entry names no index, then 400 and no item of the call is acked', async () => {
    const id = (await svc.api.post('/v1/batches').send({})).body.id as string;
    const group = (await svc.api.post(`/v1/batches/${id}/items`).send({ count: 2 })).body.groups[0].id as string;
    const res = await svc.api.post('/v1/acks').send({
      groups: [
        { batchId: id, groupId: group, indexes: [0] },
        { batchId: id, groupId: group, indexes: [] },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ succeeded: 0, pending: 2 });
  });
});
