import { dueEvents } from '../../src/store/outbox';
import { backends } from '../helpers/backends';
import { startService, TestService } from '../helpers/service';

describe.each(backends())('claiming callback events fairly (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  it('when tenant Acme uses its whole share, then the due events of tenant acme are still claimed', async () => {
    const db = svc.rollcall.db;
    const event = (id: string, tenant: string) => ({
      id,
      batch_id: id,
      tenant,
      host: `${tenant}.example:80`,
      event: 'batch.completed',
      url: 'http://x.example/',
      payload: '{}',
      status: 'pending',
      attempts: 0,
      next_attempt_at: 1,
      created_at: 1,
    });
    await db('outbox').insert([event('00000000-0000-7000-8000-000000000001', 'Acme'), event('00000000-0000-7000-8000-000000000002', 'acme')]);
    const due = await dueEvents(db, 10, 10, { tenants: ['Acme'], hosts: [], eventIds: [] });
    expect(due.map((e) => e.tenant)).toEqual(['acme']);
  });
});
