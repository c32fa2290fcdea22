import { Knex } from 'knex';

import { UUID_LENGTH } from '../domain/itemId';
import { type Db, onCitus } from './db';
import { forShare, forUpdateSkipLocked, profileOf } from './dialect';

export interface SweepCutoffs {
  /** Batches not complete whose last activity is older than this are removed. */
  idleBefore: number;
  /** Complete batches that completed (and cancelled ones cancelled) before this are removed. */
  completedBefore: number;
}

/** Batches with a callback event still pending: never due (retention waits for delivered or dead). */
const withoutPendingEvent = (trx: Knex.Transaction, query: Knex.QueryBuilder) =>
  query.whereNotExists(trx('outbox').select(trx.raw('1')).whereRaw('outbox.batch_id = batches.id').where('outbox.status', 'pending'));

/** Whether a batch row, as read, is due: the same rule as the three scans of dueCandidates. */
function isDue(query: Knex.QueryBuilder, cutoffs: SweepCutoffs): Knex.QueryBuilder {
  return query.where((due) =>
    due
      .where((idle) => idle.whereIn('state', ['open', 'sealed']).where('updated_at', '<', cutoffs.idleBefore))
      .orWhere((complete) => complete.where('state', 'complete').where('completed_at', '<', cutoffs.completedBefore))
      .orWhere((cancelled) => cancelled.where('state', 'cancelled').where('cancelled_at', '<', cutoffs.completedBefore)),
  );
}

/** Batches not complete: a child still at work. */
const LIVE = ['open', 'sealed'];

/**
 * Leaves out of the idle scan the parents of children still at work, or finished with their outcome
 * not yet acked into the parent's item (a child_outcomes row: the child's end and that row commit
 * together, and the row outlives the child's own deletion). A parent idle itself meanwhile is not
 * idle: its item waits for that outcome, which would find the parent gone. An outcome names its
 * parent by its item (`<parent batch id>:<group>:<index>`, canonical, so the id is its first 36
 * characters).
 *
 * Each check in the form its database runs in one pass over the rows it reads (docs/benchmarks.md has
 * the figures): an uncorrelated `NOT IN` had MariaDB look through every root batch (their NULL
 * parent) for each candidate, and PostgreSQL, once the live batches or the outcomes passed
 * work_mem, read them all again for each candidate: 1,000 candidates took 9 s on MariaDB with
 * 200,000 open batches, 26 s on PostgreSQL with 200,000 outcomes waiting. The children by the
 * (parent_batch_id, id) index; the outcomes, which no index leads to, by a hash anti-join where the
 * planner makes one, else by an uncorrelated `NOT IN` read once. On Citus (`sharded`) both are
 * uncorrelated, as it needs (neither column is a distribution column).
 */
function withoutWaitingParents(trx: Knex.Transaction, query: Knex.QueryBuilder, sharded: boolean): Knex.QueryBuilder {
  const parentOfOutcome = `substr(parent_item, 1, ${UUID_LENGTH})`;
  if (sharded) {
    return query
      .whereNotIn('id', trx('batches').select('parent_batch_id').whereNotNull('parent_batch_id').whereIn('state', LIVE))
      .whereNotIn('id', trx('child_outcomes').select(trx.raw(parentOfOutcome)));
  }
  query.whereNotExists(trx('batches as child').select(trx.raw('1')).whereRaw('child.parent_batch_id = batches.id').whereIn('child.state', LIVE));
  return profileOf(trx).hashAntiJoins
    ? query.whereNotExists(trx('child_outcomes').select(trx.raw('1')).whereRaw(`${parentOfOutcome} = batches.id`))
    : query.whereNotIn('id', trx('child_outcomes').select(trx.raw(parentOfOutcome)));
}

/**
 * Of idle batches `ids` (their rows locked), those with a child still at work or an outcome of one
 * still to ack: read again under the locks, in one statement of each kind per slice (the outcomes,
 * which no index leads to, were read once per batch).
 */
async function awaitingChildren(trx: Knex.Transaction, ids: string[]): Promise<Set<string>> {
  const waiting = new Set<string>();
  for (let at = 0; at < ids.length; at += IDS_PER_STATEMENT) {
    const slice = ids.slice(at, at + IDS_PER_STATEMENT);
    const parents = (await trx('batches').distinct('parent_batch_id as id').whereIn('parent_batch_id', slice).whereIn('state', LIVE)) as Array<{ id: string }>;
    const awaiting = (await trx('child_outcomes')
      .distinct(trx.raw(`substr(parent_item, 1, ${UUID_LENGTH}) as id`))
      .whereRaw(`substr(parent_item, 1, ${UUID_LENGTH}) in (${slice.map(() => '?').join(', ')})`, slice)) as Array<{ id: string }>;
    for (const { id } of [...parents, ...awaiting]) waiting.add(id);
  }
  return waiting;
}

/**
 * Up to `limit` ids that look due, read without locks: three index range scans (idle, complete,
 * cancelled), leaving out the ids in `passedOver`.
 */
async function dueCandidates(
  trx: Knex.Transaction,
  cutoffs: SweepCutoffs,
  limit: number,
  passedOver: ReadonlySet<string>,
  sharded: boolean,
): Promise<string[]> {
  const scans = [
    (q: Knex.QueryBuilder) => withoutWaitingParents(trx, q.whereIn('state', LIVE).where('updated_at', '<', cutoffs.idleBefore), sharded),
    (q: Knex.QueryBuilder) => q.where('state', 'complete').where('completed_at', '<', cutoffs.completedBefore),
    (q: Knex.QueryBuilder) => q.where('state', 'cancelled').where('cancelled_at', '<', cutoffs.completedBefore),
  ];
  const ids: string[] = [];
  for (const scan of scans) {
    if (ids.length >= limit) break;
    const query = scan(trx('batches').select('id')).limit(limit - ids.length);
    if (passedOver.size > 0) query.whereNotIn('id', [...passedOver]);
    const rows = (await withoutPendingEvent(trx, query)) as Array<{ id: string }>;
    ids.push(...rows.map((r) => r.id));
  }
  return ids;
}

/** What the sweep's statements depend on besides the dialect: whether the tables are sharded (Citus). */
export interface SweepShape {
  sharded: boolean;
}

/**
 * The sweep's shape for database `db`: asked of the service's own pool, where the answer is kept,
 * and before a chunk's transaction. Asked inside it, it took a second connection while the
 * transaction held one, and a sweep on a pool of one waited 5 s for it and failed, every time.
 */
export async function sweepShapeOf(db: Db): Promise<SweepShape> {
  return { sharded: await onCitus(db) };
}

/** One chunk's pick: the batches locked for removal, and the candidates it passed over. */
export interface DueChunk {
  locked: string[];
  /** Candidates not locked: held by another transaction (an ack, another sweep), no longer due, with an event pending, or idle parents whose child works or whose outcome is still to ack. */
  passedOver: string[];
}

/**
 * Locks up to `limit` batches that are due for removal, of candidates not in `passedOver`. The candidates are found by plain reads,
 * then each is locked by primary key, skipping a row another transaction holds (an ack in flight,
 * another replica's sweep), and checked again: a locking read sees the newest committed row, so a
 * batch an ack has just touched is no longer due. Locking by key, not by scanning the state indexes,
 * takes no range locks that would make acks of batches that are not due wait; one statement per
 * batch, because on Citus a locking read must stay on one shard. Last, a batch with a callback event
 * still pending is left out (a locking read: events are written under the batch row lock, which
 * this transaction now holds). It stops once the batches taken hold `rowBudget` group and
 * failure-reason rows (SWEEP_CHUNK_ROWS; one batch at least), counted as each is locked: a chunk of
 * SWEEP_CHUNK large batches (1,000 of 10,000,000 items: 1.2M group rows, GBs of row images) was one
 * transaction, past what Galera certifies (wsrep_max_ws_size) and minutes of undo, binary log and
 * replica lag elsewhere; cut off, it was rolled back and the next sweep chose the same batches, so
 * retention stopped for good (a review). The batch that went past the bound stays locked until the
 * commit, neither taken nor passed over: the next chunk takes it.
 */
export async function lockDueBatches(
  trx: Knex.Transaction,
  cutoffs: SweepCutoffs,
  limit: number,
  passedOver: ReadonlySet<string>,
  shape: SweepShape,
  rowBudget = Infinity,
): Promise<DueChunk> {
  const chunk: DueChunk = { locked: [], passedOver: [] };
  const idle: string[] = [];
  let rows = 0;
  for (const id of await dueCandidates(trx, cutoffs, limit, passedOver, shape.sharded)) {
    const [row] = (await forUpdateSkipLocked(trx, isDue(trx('batches').select('id', 'state').where('id', id), cutoffs))) as Array<{ state: string }>;
    if (row === undefined || (await hasPendingEvent(trx, id))) {
      chunk.passedOver.push(id);
      continue;
    }
    // Past the rows' bound (one batch at least): this one stays due, for the next chunk, and no more are locked.
    const taken = chunk.locked.length + idle.length;
    if (rowBudget !== Infinity && (rows += await rowsOfBatch(trx, id, rowBudget - rows)) > rowBudget && taken > 0) break;
    // Only an idle parent waits for its children: a complete or cancelled one takes no outcome (an
    // ack of its item is a duplicate or refused), so it goes when its retention ends.
    if (LIVE.includes(row.state)) idle.push(id);
    else chunk.locked.push(id);
    if (rows >= rowBudget) break;
  }
  const waiting = await awaitingChildren(trx, idle);
  for (const id of idle) (waiting.has(id) ? chunk.passedOver : chunk.locked).push(id);
  return chunk;
}

/** Whether batch `id` has a callback event pending, read under a share lock (no DISTINCT or LIMIT: PostgreSQL takes no row locks on a DISTINCT result). */
async function hasPendingEvent(trx: Knex.Transaction, id: string): Promise<boolean> {
  const pending = (await forShare(trx, trx('outbox').select('id').where('batch_id', id).where('status', 'pending'))) as unknown[];
  return pending.length > 0;
}

/**
 * Ids bound in one statement at most: SWEEP_CHUNK may be 100,000, past what a statement may bind
 * (PostgreSQL 65,535 parameters, SQLite 32,766), which failed every sweep so nothing was removed.
 */
const IDS_PER_STATEMENT = 1000;

/**
 * The rows a removal of batch `id` deletes beside its own, counted up to `atMost` + 1: its groups and
 * its stored failure reasons (the two that grow with a batch; its events, add records and links are
 * a few rows). Each count stops there (a `LIMIT` under it), so a batch of a million group rows is not
 * read to be counted. By the indexes that lead with batch_id.
 */
async function rowsOfBatch(trx: Knex.Transaction, id: string, atMost: number): Promise<number> {
  let rows = 0;
  for (const table of ['item_groups', 'failure_reasons']) {
    if (rows > atMost) break;
    const some = trx(table)
      .select(trx.raw('1'))
      .where('batch_id', id)
      .limit(Math.max(0, atMost - rows) + 1);
    const [counted] = (await trx.count({ n: '*' }).from(some.as('some'))) as Array<{ n: unknown }>;
    rows += Number(counted?.n ?? 0);
  }
  return rows;
}

/** Deletes the batches (rows this transaction holds) with their groups; returns the group count. */
export async function deleteBatchesWithGroups(trx: Knex.Transaction, batchIds: string[]): Promise<number> {
  let groups = 0;
  for (let at = 0; at < batchIds.length; at += IDS_PER_STATEMENT) groups += await deleteSlice(trx, batchIds.slice(at, at + IDS_PER_STATEMENT));
  return groups;
}

async function deleteSlice(trx: Knex.Transaction, batchIds: string[]): Promise<number> {
  const groups = await trx('item_groups').whereIn('batch_id', batchIds).delete();
  await trx('add_requests').whereIn('batch_id', batchIds).delete();
  await trx('failure_reasons').whereIn('batch_id', batchIds).delete();
  await trx('outbox').whereIn('batch_id', batchIds).delete();
  // Their children's links (the items are gone) and their own links (their parent items are free again).
  await trx('child_links').whereIn('parent_batch_id', batchIds).delete();
  await deleteOwnLinks(trx, batchIds);
  await trx('batches').whereIn('id', batchIds).delete();
  return groups;
}

/**
 * Deletes the links of these batches to their parent items, each by its key (parent batch, parent
 * item), read from the child's own row. Not by `child_batch_id`: no index leads with it, so on
 * MariaDB that delete scanned and locked every link, and deletes of batches with children
 * deadlocked each other (test/concurrency/deleteFamilies.test.ts); by key it is also one shard on Citus.
 * A child that ended with its outcome not yet acked into its parent item (a child_outcomes row, kept)
 * keeps its link: that item is not free for another child, which its outcome would meet. (Freed,
 * another child was made for it, and the parent completed on the deleted one's outcome while the new
 * one ran.) The parent's own deletion removes such a link, as every link to its items.
 */
async function deleteOwnLinks(trx: Knex.Transaction, batchIds: string[]): Promise<void> {
  const children = (await trx('batches').select('id', 'parent_batch_id', 'parent_item').whereIn('id', batchIds).whereNotNull('parent_item')) as Array<{
    id: string;
    parent_batch_id: string;
    parent_item: string;
  }>;
  if (children.length === 0) return;
  const outcomeOnItsWay = new Set(
    (
      (await trx('child_outcomes')
        .select('batch_id')
        .whereIn(
          'batch_id',
          children.map((child) => child.id),
        )) as Array<{ batch_id: string }>
    ).map((row) => row.batch_id),
  );
  for (const child of children) {
    if (outcomeOnItsWay.has(child.id)) continue;
    await trx('child_links').where({ parent_batch_id: child.parent_batch_id, parent_item: child.parent_item, child_batch_id: child.id }).delete();
  }
}
