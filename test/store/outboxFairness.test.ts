import { onCitus } from '../../src/store/db';
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
    const due = await dueEvents(db, 10, 10, { tenants: ['Acme'], hosts: [], pairs: [], eventIds: [] }, await onCitus(db));
    expect(due.map((e) => e.tenant)).toEqual(['acme']);
  });

  it("when tenant a uses its share of a host, then tenant b's events for that host, and a's for other hosts, are still read", async () => {
    const db = svc.rollcall.db;
    const event = (n: number, tenant: string, host: string) => ({
      id: `00000000-0000-7000-8000-00000000010${n}`,
      batch_id: `00000000-0000-7000-8000-00000000010${n}`,
      tenant,
      host,
      event: 'batch.completed',
      url: `http://${host}/`,
      payload: '{}',
      status: 'pending',
      attempts: 0,
      next_attempt_at: 1,
      created_at: 1,
    });
    await db('outbox').insert([
      event(1, 'a', 'shared.example:80'),
      event(2, 'b', 'shared.example:80'),
      event(3, 'a', 'own.example:80'),
      event(4, 'b', 'own.example:80'),
    ]);
    const due = await dueEvents(db, 10, 10, { tenants: [], hosts: [], pairs: [{ tenant: 'a', host: 'shared.example:80' }], eventIds: [] }, await onCitus(db));
    expect(
      due
        .filter((e) => ['a', 'b'].includes(e.tenant))
        .map((e) => `${e.tenant} ${e.host}`)
        .sort(),
    ).toEqual(['a own.example:80', 'b own.example:80', 'b shared.example:80']);
  });
});
