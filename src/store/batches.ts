import { Knex } from 'knex';

import { BatchRecord, BatchState } from '../domain/batch';
import { Db, onCitus, Queryable } from './db';
import { forUpdate, forUpdateSkipLocked, profileOf } from './dialect';
import { selectRows } from './readDecideWrite';
import { inTransaction, TransactionOptions, withRetries } from './transaction';

export interface BatchRow {
  id: string;
  tenant: string;
  state: string;
  user_key: string | null;
  metadata: string | null;
  callback_url: string | null;
  total: number | string;
  succeeded: number | string;
  failed: number | string;
  open_groups: number;
  created_at: number | string;
  updated_at: number | string;
  sealed_at: number | string | null;
  completed_at: number | string | null;
  cancelled_at: number | string | null;
  parent_item: string | null;
  parent_batch_id: string | null;
  first_failure_at: number | string | null;
  failures_dropped: number | string;
}

const num = (value: number | string): number => Number(value);
const numOrNull = (value: number | string | null): number | null => (value === null ? null : Number(value));

export function batchFromRow(row: BatchRow): BatchRecord {
  return {
    id: row.id,
    tenant: row.tenant,
    state: row.state as BatchState,
    userKey: row.user_key,
    metadata: row.metadata === null ? null : (JSON.parse(row.metadata) as Record<string, unknown>),
    callbackUrl: row.callback_url,
    total: num(row.total),
    succeeded: num(row.succeeded),
    failed: num(row.failed),
    openGroups: num(row.open_groups),
    createdAt: num(row.created_at),
    updatedAt: num(row.updated_at),
    sealedAt: numOrNull(row.sealed_at),
    completedAt: numOrNull(row.completed_at),
    cancelledAt: numOrNull(row.cancelled_at),
    parentItem: row.parent_item,
    firstFailureAt: numOrNull(row.first_failure_at),
    failuresDropped: num(row.failures_dropped),
  };
}

function toRow(batch: BatchRecord): BatchRow {
  return {
    id: batch.id,
    tenant: batch.tenant,
    state: batch.state,
    user_key: batch.userKey,
    metadata: batch.metadata === null ? null : JSON.stringify(batch.metadata),
    callback_url: batch.callbackUrl,
    total: batch.total,
    succeeded: batch.succeeded,
    failed: batch.failed,
    open_groups: batch.openGroups,
    created_at: batch.createdAt,
    updated_at: batch.updatedAt,
    sealed_at: batch.sealedAt,
    completed_at: batch.completedAt,
    cancelled_at: batch.cancelledAt,
    parent_item: batch.parentItem,
    parent_batch_id: batch.parentItem === null ? null : batch.parentItem.slice(0, 36),
    first_failure_at: batch.firstFailureAt,
    failures_dropped: batch.failuresDropped,
  };
}

/**
 * Inserts a new batch row. A child's link to its parent item goes in the same transaction: a second
 * child for the same item fails on the link's key (a duplicate key), whichever shard the two child
 * rows land on (migration 0013). Locks: the new rows.
 */
export async function insertBatch(db: Db, options: TransactionOptions, batch: BatchRecord): Promise<void> {
  const row = toRow(batch);
  if (row.parent_item === null) return void (await withRetries(options, () => db('batches').insert(row)));
  await inTransaction(db, options, async (trx) => {
    await trx('child_links').insert({ parent_batch_id: row.parent_batch_id, parent_item: row.parent_item, child_batch_id: row.id });
    await trx('batches').insert(row);
  });
}

/** Reads one batch without locking. Returns null when it does not exist. */
export async function findBatch(q: Queryable, id: string): Promise<BatchRecord | null> {
  const [row] = await selectRows<BatchRow>(q, q('batches').where({ id }));
  return row ? batchFromRow(row) : null;
}

/** The tenant of each of these batches that exists, by id; read without locks, in chunks of 1,000 ids. */
export async function findBatchTenants(q: Queryable, ids: string[]): Promise<Map<string, string>> {
  const tenants = new Map<string, string>();
  for (let i = 0; i < ids.length; i += 1000) {
    const rows = (await q('batches')
      .select('id', 'tenant')
      .whereIn('id', ids.slice(i, i + 1000))) as Array<{ id: string; tenant: string }>;
    for (const row of rows) tenants.set(row.id, row.tenant);
  }
  return tenants;
}

/** A tenant's unfinished (open or sealed) batches and the items they hold; no locks, from one index. */
export async function unfinishedUsage(q: Queryable, tenant: string): Promise<{ batches: number; items: number }> {
  const [row] = (await q('batches')
    .where('tenant', tenant)
    .whereIn('state', ['open', 'sealed'])
    .select(q.raw('count(*) as batches'), q.raw('coalesce(sum(total), 0) as items'))) as Array<{ batches: unknown; items: unknown }>;
  return { batches: Number(row?.batches ?? 0), items: Number(row?.items ?? 0) };
}

/** Reads and row-locks one batch until the transaction ends. Returns null when it does not exist. */
export async function lockBatch(trx: Knex.Transaction, id: string): Promise<BatchRecord | null> {
  const [row] = (await lockBatchQuery(trx, id)) as BatchRow[];
  return row ? batchFromRow(row) : null;
}

/**
 * Reads and row-locks one batch (in the ack transaction, batches go in id order: the one lock order
 * every transaction keeps is batch rows by id, then their group rows by id). One statement per batch,
 * never `id IN (…)`: on Citus a locking read must stay on one shard.
 */
export function lockBatchQuery(q: Queryable, id: string): Knex.QueryBuilder {
  return forUpdate(q, q('batches').where('id', id));
}

/** On Citus, how many batches are asked about at once (one statement each). */
const CITUS_HELD_ASKS_AT_ONCE = 4;

/**
 * Which of these batches another transaction holds locked right now, asked without waiting for any
 * row (`FOR UPDATE SKIP LOCKED`: a batch that exists but is skipped is held). Each statement commits
 * on its own, so it holds rows only while it runs: another replica's round or question running at
 * that very moment may still be taken for a hold (the caller allows for that). One statement for
 * all; on Citus, where a locking read must stay on one shard, one per batch, a few at a time and
 * none begun after `askUntil` (performance.now()): a round naming thousands of batches sent as many
 * statements at once, which queued on the pool ahead of every other request, and ran on after the
 * caller had stopped listening. Empty where the dialect cannot tell batches apart (SQLite: a held
 * file holds every batch).
 */
export async function batchesHeldElsewhere(db: Db, ids: string[], askUntil = Infinity): Promise<string[]> {
  if (!profileOf(db).skipLocked || ids.length === 0) return [];
  const existing = ((await db('batches').select('id').whereIn('id', ids)) as Array<{ id: string }>).map((row) => row.id);
  const heldOf = async (some: string[]) => {
    const free = (await forUpdateSkipLocked(db, db('batches').select('id').whereIn('id', some))) as Array<{ id: string }>;
    const freeIds = new Set(free.map((row) => row.id));
    return some.filter((id) => !freeIds.has(id));
  };
  if (!(await onCitus(db))) return heldOf(existing);
  const held: string[] = [];
  for (let at = 0; at < existing.length && performance.now() < askUntil; at += CITUS_HELD_ASKS_AT_ONCE) {
    const some = existing.slice(at, at + CITUS_HELD_ASKS_AT_ONCE);
    held.push(...(await Promise.all(some.map((id) => heldOf([id])))).flat());
  }
  return held;
}

/** Runs updateBatchQuery. */
export async function updateBatch(trx: Knex.Transaction, batch: BatchRecord): Promise<void> {
  await updateBatchQuery(trx, batch);
}

/**
 * Writes a batch's state, counters and times (absolute values computed under its row lock). Only the
 * columns that can change after creation: every ack transaction runs this, and re-writing metadata,
 * tenant or callback URL there would be work for nothing.
 */
export function updateBatchQuery(q: Queryable, batch: BatchRecord): Knex.QueryBuilder {
  return q('batches').where({ id: batch.id }).update(batchUpdate(batch));
}

/** The columns updateBatchQuery writes, by name. */
export function batchUpdate(batch: BatchRecord) {
  return {
    state: batch.state,
    total: batch.total,
    succeeded: batch.succeeded,
    failed: batch.failed,
    open_groups: batch.openGroups,
    updated_at: batch.updatedAt,
    sealed_at: batch.sealedAt,
    completed_at: batch.completedAt,
    cancelled_at: batch.cancelledAt,
    first_failure_at: batch.firstFailureAt,
    failures_dropped: batch.failuresDropped,
  };
}

/** The batches among `ids` that are complete or cancelled (one query for every waiter of a process). */
async function findFinishedBatches(q: Queryable, ids: string[]): Promise<BatchRecord[]> {
  if (ids.length === 0) return [];
  return ((await q('batches').whereIn('id', ids).whereIn('state', ['complete', 'cancelled'])) as BatchRow[]).map(batchFromRow);
}

/** Of these batches, the finished ones (whole) and the ids of those that no longer exist (deleted). */
export async function findFinishedOrGone(q: Queryable, ids: string[]): Promise<{ finished: BatchRecord[]; gone: string[] }> {
  if (ids.length === 0) return { finished: [], gone: [] };
  // One narrow read of every waited-for row; whole rows only for the few that finished.
  const rows = (await q('batches').select('id', 'state').whereIn('id', ids)) as Array<{ id: string; state: string }>;
  const present = new Set(rows.map((row) => row.id));
  const finishedIds = rows.filter((row) => row.state === 'complete' || row.state === 'cancelled').map((row) => row.id);
  return { finished: await findFinishedBatches(q, finishedIds), gone: ids.filter((id) => !present.has(id)) };
}

export interface BatchFilter {
  tenant: string;
  state?: BatchState;
  userKey?: string;
  /** Only the children of this batch. */
  parentBatchId?: string;
  /** Only the child standing for this item (unique, so at most one row). */
  parentItem?: string;
  /** Only batches created before this one (ids are UUIDv7, so id order is creation order). */
  beforeId?: string;
  limit: number;
}

/** Lists batches newest first by id. No locks; one index range scan for each filter. */
export async function listBatches(q: Queryable, filter: BatchFilter): Promise<BatchRecord[]> {
  return ((await listBatchesQuery(q, filter)) as BatchRow[]).map(batchFromRow);
}

/**
 * The statement of listBatches. Its indexes: (tenant, id); (tenant, state, id, total) with a state;
 * (tenant, user_key, id) with a userKey (0020); (parent_batch_id, id) with a parent; with a state
 * too, (tenant, user_key, state, id) and (parent_batch_id, state, id) (0022); with a parent and a
 * userKey, (parent_batch_id, user_key, id) (0024).
 */
export function listBatchesQuery(q: Queryable, filter: BatchFilter): Knex.QueryBuilder {
  const query = q('batches').where('tenant', filter.tenant).orderBy('id', 'desc').limit(filter.limit);
  if (filter.state) query.where('state', filter.state);
  if (filter.userKey !== undefined) query.where('user_key', filter.userKey);
  if (filter.parentBatchId !== undefined) query.where('parent_batch_id', filter.parentBatchId);
  // With its parent's id too: Citus has no index on parent_item alone (migration 0014), and
  // (parent_batch_id, id) narrows the scan to the parent's children on every store.
  if (filter.parentItem !== undefined) query.where('parent_batch_id', filter.parentItem.slice(0, 36)).where('parent_item', filter.parentItem);
  // A child is always its parent's tenant's: another tenant's parent lists nothing, and none of its
  // children is read (the parent index has no tenant: they were all read and dropped, as long as
  // there were children, which timed told that the batch exists). In this one statement, so that
  // such a parent and a missing one cost the same round trip; a parent gone still lists its children.
  const parentId = filter.parentBatchId ?? filter.parentItem?.slice(0, 36);
  if (parentId !== undefined)
    query.whereNotExists(q('batches as parent').select(q.raw('1')).where('parent.id', parentId).whereNot('parent.tenant', filter.tenant));
  if (filter.beforeId) query.where('id', '<', filter.beforeId);
  return query;
}
