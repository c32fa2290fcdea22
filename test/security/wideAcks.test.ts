import { backends } from '../helpers/backends';
import { startService, TestService } from '../helpers/service';

const ADD_LIMIT = 10_000_000;

describe.each(backends())('acks spread over thousands of groups (%s)', (_name, backend) => {
  let svc: TestService;
  let batchId: string;
  let groups: Array<{ id: string; size: number }>;

  beforeAll(async () => {
    svc = await startService(backend);
    batchId = (await svc.api.post('/v1/batches').send({})).body.id as string;
    groups = [];
    for (let added = 0; added < 90_000_000; added += ADD_LIMIT) {
      const res = await svc.api.post(`/v1/batches/${batchId}/items`).send({ count: ADD_LIMIT });
      expect(res.status).toBe(201);
      groups.push(...res.body.groups);
    }
  }, 120_000);
  afterAll(() => svc.stop());

  it('when one call acks 10,000 IDs, each in another group of a 90M-item batch, then all 10,000 are acked', async () => {
    const ids = groups.slice(0, 10_000).map((g) => `${batchId}:${g.id}:0`);
    const res = await svc.api.post('/v1/acks').send({ ids });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ acked: 10_000, duplicates: 0, rejected: [] });
    expect((await svc.api.get(`/v1/batches/${batchId}`)).body.succeeded).toBe(10_000);
  }, 60_000);

  it('when four calls of 2,500 groups each are merged, then each is answered with its own count', async () => {
    const calls = [0, 1, 2, 3].map((k) => groups.slice(k * 2500, (k + 1) * 2500).map((g) => `${batchId}:${g.id}:1`));
    const results = await Promise.all(calls.map((ids) => svc.api.post('/v1/acks').send({ ids, outcome: 'failed' })));
    for (const res of results) expect(res.body).toMatchObject({ acked: 2500, duplicates: 0 });
    expect((await svc.api.get(`/v1/batches/${batchId}`)).body).toMatchObject({ succeeded: 10_000, failed: 10_000 });
  }, 60_000);
});
