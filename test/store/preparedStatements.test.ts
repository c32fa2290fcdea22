import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

/**
 * A rolling deploy: a new replica's migration adds a column while this replica's pooled connections
 * hold prepared statements (PostgreSQL's ack statements, pgDriver.ts). Acks and status reads must go
 * on: a prepared statement whose result columns follow the table would fail with "cached plan must
 * not change result type".
 */
describe.each(backends())('a column added while the service runs (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    // One connection: the statements prepared by the first acks are the ones the later ones use.
    svc = await startService(backend, { DB_POOL_SIZE: '1' });
  });
  afterAll(() => svc.stop());

  it('when a migration adds columns to batches and item_groups, then acks and status reads still answer', async () => {
    const { id, ids } = await batchWith(svc.client, 4);
    expect((await svc.api.post('/v1/acks').send({ ids: [ids[0]] })).body.acked).toBe(1);
    expect((await svc.api.get(`/v1/batches/${id}`)).body.succeeded).toBe(1);

    const db = svc.rollcall.db;
    await db.schema.alterTable('batches', (t) => t.integer('added_later').nullable());
    await db.schema.alterTable('item_groups', (t) => t.integer('added_later').nullable());

    const acked = await svc.api.post('/v1/acks').send({ ids: [ids[1], ids[2]], outcome: 'failed', error: 'boom' });
    expect(acked.status).toBe(200);
    expect(acked.body.acked).toBe(2);
    const status = await svc.api.get(`/v1/batches/${id}`);
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({ succeeded: 1, failed: 2, pending: 1 });
  });
});
