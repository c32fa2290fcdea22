import { v7 as uuidv7 } from 'uuid';

import { listBatchesQuery } from '../../src/store/batches';
import { Db, openDb, Statement } from '../../src/store/db';
import { profileOf } from '../../src/store/dialect';
import { migrateLatest } from '../../src/store/migrations';
import { backends } from '../helpers/backends';

/** The indexes the database's plan for `query` reads (a Citus shard's by the name of the index it is a shard of). */
async function indexesRead(db: Db, query: Statement): Promise<string[]> {
  const { sql, bindings } = query.toSQL();
  const dialect = profileOf(db).name;
  if (dialect === 'mysql') {
    const [rows] = (await db.raw(`EXPLAIN ${sql}`, bindings)) as [Array<{ key: string | null }>];
    return rows.flatMap((row) => (row.key ? [row.key] : []));
  }
  if (dialect === 'postgres') {
    const { rows } = (await db.raw(`EXPLAIN (FORMAT JSON) ${sql}`, bindings)) as { rows: Array<{ 'QUERY PLAN': unknown }> };
    return [...JSON.stringify(rows[0]!['QUERY PLAN']).matchAll(/"Index Name":"([^"]+?)(?:_\d{5,})?"/g)].map((match) => match[1]!);
  }
  const rows = (await db.raw(`EXPLAIN QUERY PLAN ${sql}`, bindings)) as Array<{ detail: string }>;
  return rows.flatMap((row) => [...row.detail.matchAll(/USING (?:COVERING )?INDEX (\w+)/g)].map((match) => match[1]!));
}

/** Batch rows of `tenant`, `count` of them with `userKey` (in `state`, children of `parent`), written as the store writes them. */
async function batchesOf(db: Db, tenant: string, userKey: string | null, count: number, state = 'open', parent?: string): Promise<void> {
  const rows = Array.from({ length: count }, (_, i) => ({
    id: uuidv7(),
    tenant,
    state,
    user_key: userKey,
    ...(parent ? { parent_batch_id: parent, parent_item: `${parent}:${uuidv7()}:${i}` } : {}),
    total: 0,
    succeeded: 0,
    failed: 0,
    open_groups: 0,
    created_at: 1,
    updated_at: 1,
    failures_dropped: 0,
  }));
  for (let at = 0; at < rows.length; at += 500) await db('batches').insert(rows.slice(at, at + 500));
}

async function analyze(db: Db): Promise<void> {
  const dialect = profileOf(db).name;
  await db.raw(dialect === 'mysql' ? 'ANALYZE TABLE batches' : dialect === 'postgres' ? 'ANALYZE batches' : 'ANALYZE');
}

describe.each(backends())('listing batches (%s)', (_name, backend) => {
  jest.setTimeout(60_000);

  it("when a tenant lists its batches of a userKey that a neighbour's thousands of batches share, then one index range of its own is read", async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      await migrateLatest(db);
      await batchesOf(db, 'neighbour', 'nightly', 3000);
      await batchesOf(db, 'me', null, 3000);
      await batchesOf(db, 'me', 'nightly', 3);
      await analyze(db);
      // Either index of the tenant's own key reads none of the neighbour's: its three batches, sorted or
      // not, cost alike (the next test holds the unsorted one to lists with a state).
      for (const state of [undefined, 'open' as const]) {
        const [index, ...more] = await indexesRead(db, listBatchesQuery(db, { tenant: 'me', userKey: 'nightly', state, limit: 51 }));
        expect([['batches_tenant_user_key', 'batches_tenant_user_key_state'].includes(index!), more]).toEqual([true, []]);
      }
      expect(await listBatchesQuery(db, { tenant: 'me', userKey: 'nightly', limit: 51 })).toHaveLength(3);
    } finally {
      await db.destroy();
      await database.drop();
    }
  });

  it('when a tenant lists the few batches of a userKey, or of a parent, in one state among thousands in another, then one index range of those is read', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      await migrateLatest(db);
      await batchesOf(db, 'me', 'nightly', 3000, 'complete');
      await batchesOf(db, 'me', 'nightly', 3, 'cancelled');
      const [parent] = (await db('batches').select('id').where('tenant', 'me').limit(1)) as Array<{ id: string }>;
      await batchesOf(db, 'me', null, 3000, 'complete', parent!.id);
      await batchesOf(db, 'me', null, 3, 'cancelled', parent!.id);
      await analyze(db);
      // Without a state, not the new index, which holds them by state: the 3,003 read and sorted for 51
      // (each database walks one newest first instead: the key's, the tenant's or the primary key).
      expect(await indexesRead(db, listBatchesQuery(db, { tenant: 'me', userKey: 'nightly', limit: 51 }))).not.toContain('batches_tenant_user_key_state');
      const byKey = listBatchesQuery(db, { tenant: 'me', userKey: 'nightly', state: 'cancelled', limit: 51 });
      expect(await indexesRead(db, byKey)).toEqual(['batches_tenant_user_key_state']);
      expect(await byKey).toHaveLength(3);
      const byParent = listBatchesQuery(db, { tenant: 'me', parentBatchId: parent!.id, state: 'cancelled', limit: 51 });
      // The parent's tenant is checked by its key (the primary key) beside the children's range.
      expect((await indexesRead(db, byParent)).filter((index) => !/pkey|PRIMARY|autoindex/i.test(index))).toEqual(['batches_parent_state']);
      expect(await byParent).toHaveLength(3);
    } finally {
      await db.destroy();
      await database.drop();
    }
  });

  it('when a tenant lists the few children of a parent with a userKey, among thousands of its children and of its batches with that key, then one index range of those is read', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      await migrateLatest(db);
      await batchesOf(db, 'me', 'nightly', 3000);
      const [parent] = (await db('batches').select('id').where('tenant', 'me').limit(1)) as Array<{ id: string }>;
      await batchesOf(db, 'me', 'hourly', 3000, 'open', parent!.id);
      await batchesOf(db, 'me', 'nightly', 3, 'open', parent!.id);
      await analyze(db);
      for (const state of [undefined, 'open' as const]) {
        const query = listBatchesQuery(db, { tenant: 'me', parentBatchId: parent!.id, userKey: 'nightly', state, limit: 51 });
        expect((await indexesRead(db, query)).filter((index) => !/pkey|PRIMARY|autoindex/i.test(index))).toEqual(['batches_parent_user_key']);
        expect(await query).toHaveLength(3);
      }
    } finally {
      await db.destroy();
      await database.drop();
    }
  });
});
