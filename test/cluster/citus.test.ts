import { Knex } from 'knex';

import { backends, describeEachOrSkip } from '../helpers/backends';
import { Receiver } from '../helpers/receiver';
import { chunks, itemIds, shuffled, startReplica, startService, TestApp, TestService } from '../helpers/service';

/**
 * rollcall sharded by batch id on Citus (TEST_CITUS_URL: a coordinator and its workers), and the
 * same file on plain PostgreSQL in CI, where the migrations distribute nothing but every statement
 * takes the shape Citus needs (locking reads on one batch, claims by conditional UPDATE), so that
 * code path is run on every commit.
 */
const BATCHES = 24;
const ITEMS = 300;

const onCitus = (name: string) => name === 'citus';

async function distributedTables(db: Knex): Promise<Array<{ table_name: string; distribution_column: string; colocation_id: number }>> {
  const result = await db.raw(
    "SELECT table_name::text, distribution_column, colocation_id FROM citus_tables WHERE citus_table_type = 'distributed' ORDER BY 1",
  );
  return result.rows;
}

/** The worker ports that hold the given batches' rows. */
async function workersOf(db: Knex, batchIds: string[]): Promise<Set<number>> {
  const ports = new Set<number>();
  for (const id of batchIds) {
    const result = await db.raw(
      "SELECT s.nodeport FROM citus_shards s WHERE s.table_name = 'batches'::regclass AND s.shardid = get_shard_id_for_distribution_column('batches', ?::text)",
      [id],
    );
    ports.add(Number(result.rows[0].nodeport));
  }
  return ports;
}

// PostgreSQL (TEST_PG_URL, set by .ci/run) and Citus (TEST_CITUS_URL / TEST_CITUS=1): skipped, not
// an empty table, when neither is set.
const postgres = backends().filter(([name]) => name === 'pg' || name === 'citus');
const describeOnPostgres = describeEachOrSkip(postgres);

describeOnPostgres('sharded by batch id (%s)', (name, backend) => {
  let svc: TestService;
  let replicas: TestApp[];
  let receiver: Receiver;
  const batchIds: string[] = [];

  beforeAll(async () => {
    receiver = new Receiver();
    await receiver.start();
    svc = await startService(backend, { COMPLETED_RETENTION: '1h', ACK_GROUP_COMMIT_WINDOW_MS: '5' });
    replicas = [svc, await startReplica(svc), await startReplica(svc)];
  });
  afterAll(async () => {
    for (const replica of replicas.slice(1)) await replica.stop();
    await svc.stop();
    await receiver.stop();
  });

  it('when migrated, then every batch-scoped table is sharded by batch id and co-located (Citus)', async () => {
    const db = svc.rollcall.db;
    if (!onCitus(name)) {
      // Plain PostgreSQL: migration 0014 did nothing, the keys are as before.
      const outboxKey = await db.raw("SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conname = 'outbox_pkey'");
      expect(outboxKey.rows[0].def).toBe('PRIMARY KEY (id)');
      return;
    }
    const tables = await distributedTables(db);
    expect(tables.map((t) => [t.table_name, t.distribution_column])).toEqual([
      ['add_requests', 'batch_id'],
      ['batches', 'id'],
      ['child_links', 'parent_batch_id'],
      ['child_outcomes', 'batch_id'],
      ['failure_reasons', 'batch_id'],
      ['item_groups', 'batch_id'],
      ['outbox', 'batch_id'],
    ]);
    expect(new Set(tables.map((t) => t.colocation_id)).size).toBe(1);
  });

  it('when 3 replicas take multi-batch acks with duplicates, then counts are exact and each completes once', async () => {
    const all: string[] = [];
    for (let i = 0; i < BATCHES; i++) {
      const id = (await replicas[i % 3]!.api.post('/v1/batches').send({ callbackUrl: receiver.url, userKey: 'sharded' })).body.id as string;
      const added = await replicas[i % 3]!.api.post(`/v1/batches/${id}/items`).send({ count: ITEMS });
      await replicas[(i + 1) % 3]!.api.post(`/v1/batches/${id}/seal`);
      batchIds.push(id);
      all.push(...itemIds(id, added.body.groups));
    }
    if (onCitus(name)) expect((await workersOf(svc.rollcall.db, batchIds)).size).toBe(2);

    // Every ID once, 10% again; calls of 150 IDs span several batches (and shards).
    const sent = shuffled([...all, ...all.filter((_, i) => i % 10 === 0)], 7);
    const calls = chunks(sent, 150);
    let acked = 0;
    let duplicates = 0;
    const completed: string[] = [];
    await Promise.all(
      Array.from({ length: 12 }, async (_, client) => {
        for (let i = client; i < calls.length; i += 12) {
          const res = await replicas[i % 3]!.api.post('/v1/acks').send({ ids: calls[i] });
          expect(res.status).toBe(200);
          acked += res.body.acked;
          duplicates += res.body.duplicates;
          completed.push(...res.body.completed.map((c: { id: string }) => c.id));
        }
      }),
    );
    expect(acked).toBe(BATCHES * ITEMS);
    expect(duplicates).toBe(sent.length - all.length);
    expect(completed.sort()).toEqual([...batchIds].sort());
  });

  it('when 3 replicas deliver callbacks at once, then each batch.completed is sent exactly once', async () => {
    await Promise.all(replicas.map((r) => r.rollcall.dispatcher.deliverDue()));
    await Promise.all(replicas.map((r) => r.rollcall.dispatcher.deliverDue()));
    const events = receiver.deliveries.map((d) => d.headers['x-rollcall-event-id']);
    expect(events).toHaveLength(BATCHES);
    expect(new Set(events).size).toBe(BATCHES);
  });

  it('when batches are listed in pages, then they come back across shards newest first, none twice', async () => {
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await svc.api.get('/v1/batches').query({ userKey: 'sharded', limit: 5, ...(cursor ? { cursor } : {}) });
      expect(page.status).toBe(200);
      seen.push(...page.body.batches.map((b: { id: string }) => b.id));
      cursor = page.body.nextCursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual([...batchIds].sort().reverse());
  });

  it('when two children are made for each item at once, then exactly one stands for each item', async () => {
    const parent = (await svc.api.post('/v1/batches').send({})).body.id as string;
    const added = await svc.api.post(`/v1/batches/${parent}/items`).send({ count: 8 });
    const items = itemIds(parent, added.body.groups);
    const tries = await Promise.all(items.flatMap((item) => [0, 1].map((r) => replicas[r]!.api.post('/v1/batches').send({ parentItem: item }))));
    expect(tries.filter((t) => t.status === 201)).toHaveLength(items.length);
    expect(tries.filter((t) => t.status === 409).map((t) => t.body.error.code)).toEqual(items.map(() => 'item_not_pending'));
    const children = await svc.api.get('/v1/batches').query({ parent, limit: 100 });
    expect(children.body.batches.map((b: { parentItem: string }) => b.parentItem).sort()).toEqual([...items].sort());
  });

  it('when 3 replicas sweep at once past the retention, then each completed batch is removed once', async () => {
    svc.clock.now += 2 * 3600_000;
    const swept = await Promise.all(replicas.map((r) => r.api.post('/v1/admin/sweep')));
    for (const res of swept) expect(res.status).toBe(200);
    expect(swept.reduce((n, res) => n + res.body.batchesRemoved, 0)).toBe(BATCHES);
    for (const id of batchIds) expect((await svc.api.get(`/v1/batches/${id}`)).status).toBe(404);
  });
});
