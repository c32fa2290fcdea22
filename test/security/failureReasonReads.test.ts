import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { ProxiedService, startBehindProxy, startService, TestService } from '../helpers/service';

/**
 * An ack that fails items with an error reads what it needs of its batches' stored reasons: how many
 * there are, and those of the items it names. It read every stored reason of every batch it named (up
 * to FAILURE_REASONS_PER_BATCH, 1,000 each): one call naming 10,000 batches with full lists made the
 * replica hold ten million rows at once, for every tenant's requests to wait behind or fail with.
 */
describe.each(backends())('an ack of failures in batches whose reason lists are full (%s)', (_name, backend) => {
  let svc: TestService | ProxiedService;
  beforeAll(async () => {
    svc = backend.name === 'sqlite' ? await startService(backend) : await startBehindProxy(backend);
  });
  afterAll(() => svc.stop());

  /** What the database answers from now on: on SQLite the rows knex gets, on a server the bytes sent through the proxy. */
  function answered(): { amount(): number; stop(): void } {
    if ('proxy' in svc) {
      const counted = svc.proxy.countReceived();
      return { amount: counted.bytes, stop: counted.stop };
    }
    let rows = 0;
    const count = (response: unknown) => void (Array.isArray(response) && (rows += response.length));
    svc.rollcall.db.on('query-response', count);
    return { amount: () => rows, stop: () => void svc.rollcall.db.off('query-response', count) };
  }

  it('when one more item fails with an error, then the stored reasons are counted, not read back', async () => {
    const { id, groups, ids } = await batchWith(svc.client, 1010);
    const group = groups[0]!.id;
    const full = await svc.api.post('/v1/acks').send({ groups: [{ batchId: id, groupId: group, indexes: [[0, 999]] }], outcome: 'failed', error: 'x' });
    expect(full.body).toMatchObject({ acked: 1000 });

    const reads = answered();
    try {
      const res = await svc.api.post('/v1/acks').send({ ids: [ids[1000], ids[5]], outcome: 'failed', error: 'the latest' });
      expect([res.status, res.body.acked, res.body.duplicates]).toEqual([200, 1, 1]);
    } finally {
      reads.stop();
    }
    // 1,000 stored reasons read back are ≥ 1,000 rows, ≥ 40 KB; a count and the two named items, a few.
    expect(reads.amount()).toBeGreaterThan(0); // the count itself works
    expect(reads.amount()).toBeLessThan(backend.name === 'sqlite' ? 50 : 20_000);

    // And the list is as before: full, the latest reason of a kept item wins, one more dropped.
    const all: Array<{ id: string; error: string }> = [];
    let page: { failures: typeof all; nextCursor: string | null; dropped: number } | null = null;
    do {
      const after: string = page?.nextCursor ? `&cursor=${page.nextCursor}` : '';
      page = (await svc.api.get(`/v1/batches/${id}/failures?limit=500${after}`)).body as { failures: typeof all; nextCursor: string | null; dropped: number };
      all.push(...page.failures);
    } while (page.nextCursor !== null);
    expect([all.length, page.dropped]).toEqual([1000, 1]);
    expect(all.find((failure) => failure.id === ids[5])).toMatchObject({ error: 'the latest' });
  });
});
