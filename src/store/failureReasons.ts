import { Knex } from 'knex';

import { IndexRun, reasonKey, ReasonPlan, StoredReasonKeys } from '../domain/failureReasons';
import { Queryable } from './db';
import { selectRows } from './readDecideWrite';

interface ReasonKeyRow {
  group_id: string;
  item_index: number | string;
}

interface ReasonRow extends ReasonKeyRow {
  error: string;
  failed_at: number | string;
}

/** What the ack transaction reads of a batch's stored reasons. */
export interface StoredReasons extends StoredReasonKeys {
  /** The newest `failed_at` among them (0 for none): the reasons it writes are stamped later (reasonTime). */
  newest: number;
}

/**
 * How many reasons a batch keeps, and the newest one's time: one row, whatever the count, for the
 * batches named by failures with an error. Read in the ack transaction after its batch row is
 * locked, and every writer of a batch's reasons holds that lock: so a plain read (its snapshot taken
 * after the lock was granted) already sees every committed reason. A locking read would add next-key
 * locks that reach into the neighbouring batch's key range, and make ack transactions of unrelated
 * batches wait for (or deadlock with) each other.
 */
export function reasonCountQuery(q: Queryable, batchId: string): Knex.QueryBuilder {
  return q('failure_reasons').where('batch_id', batchId).count({ kept: '*' }).max({ newest: 'failed_at' });
}

/** Runs per statement: an OR of this many ranges stays far below SQLite's expression depth (1,000). */
const RUNS_PER_STATEMENT = 200;

/** The runs each of namedReasonsQueries' statements reads: one batch's, at most RUNS_PER_STATEMENT. */
function runsOfStatements(runs: readonly IndexRun[]): IndexRun[][] {
  const byBatch = new Map<string, IndexRun[]>();
  for (const run of runs) {
    let list = byBatch.get(run.batchId);
    if (!list) byBatch.set(run.batchId, (list = []));
    list.push(run);
  }
  return [...byBatch.values()].flatMap((list) =>
    Array.from({ length: Math.ceil(list.length / RUNS_PER_STATEMENT) }, (_, i) => list.slice(i * RUNS_PER_STATEMENT, (i + 1) * RUNS_PER_STATEMENT)),
  );
}

/**
 * The stored reasons among the items these runs name (runsNamedByFailures): at most as many rows as
 * the calls name items, unlike every stored key of each batch named. Read as reasonCountQuery is.
 */
export function namedReasonsQueries(q: Queryable, runs: readonly IndexRun[]): Knex.QueryBuilder[] {
  return runsOfStatements(runs).map((some) =>
    q('failure_reasons')
      .select('batch_id', 'group_id', 'item_index')
      .where('batch_id', some[0]!.batchId)
      .where((any) => {
        for (const run of some) any.orWhere((one) => one.where('group_id', run.groupId).whereBetween('item_index', [run.from, run.to]));
      }),
  );
}

/** How many statements namedReasonsQueries makes of these runs. */
export const namedReasonsStatementCount = (runs: readonly IndexRun[]): number => runsOfStatements(runs).length;

/** StoredReasons per batch, from reasonCountQuery's rows (batch by batch, as `batchIds`) and namedReasonsQueries'. */
export function storedReasonsFrom(batchIds: readonly string[], counts: unknown[], named: unknown[]): Map<string, StoredReasons> {
  const keys = new Map(batchIds.map((batchId) => [batchId, new Set<string>()]));
  for (const row of (named as Array<Array<ReasonKeyRow & { batch_id: string }>>).flat()) {
    keys.get(row.batch_id)?.add(reasonKey(row.group_id, Number(row.item_index)));
  }
  return new Map(
    batchIds.map((batchId, i) => {
      const [row] = counts[i] as Array<{ kept: number | string; newest: number | string | null }>;
      return [batchId, { count: Number(row?.kept ?? 0), newest: Number(row?.newest ?? 0), named: keys.get(batchId) ?? new Set() }];
    }),
  );
}

/** Rows per statement: a reason is up to 1,000 characters, so a statement stays well under a packet. */
const CHUNK = 200;

const splitKey = (key: string): [groupId: string, index: number] => {
  const at = key.lastIndexOf(':');
  return [key.slice(0, at), Number(key.slice(at + 1))];
};

/** The rows one batch's reason plan writes (upserts: latest reason wins) and the keys it removes. */
export function reasonPlanRows(batchId: string, plan: ReasonPlan, now: number) {
  const upserts = [...plan.upserts].map(([key, error]) => {
    const [groupId, index] = splitKey(key);
    return { batch_id: batchId, group_id: groupId, item_index: index, error, failed_at: now };
  });
  const deletes = [...plan.deletes].map((key) => {
    const [groupId, index] = splitKey(key);
    return { batch_id: batchId, group_id: groupId, item_index: index };
  });
  return { upserts, deletes };
}

/** The writes of one batch's reason plan: upserts (latest reason wins) and deletes, per group. */
export function writeReasonsQueries(q: Queryable, batchId: string, plan: ReasonPlan, now: number): Knex.QueryBuilder[] {
  const statements: Knex.QueryBuilder[] = [];
  const { upserts, deletes } = reasonPlanRows(batchId, plan, now);
  for (let i = 0; i < upserts.length; i += CHUNK) {
    statements.push(
      q('failure_reasons')
        .insert(upserts.slice(i, i + CHUNK))
        .onConflict(['batch_id', 'group_id', 'item_index'])
        .merge(['error', 'failed_at']),
    );
  }
  const byGroup = new Map<string, number[]>();
  for (const { group_id: groupId, item_index: index } of deletes) {
    let list = byGroup.get(groupId);
    if (!list) byGroup.set(groupId, (list = []));
    list.push(index);
  }
  for (const [groupId, indexes] of byGroup) {
    statements.push(q('failure_reasons').where({ batch_id: batchId, group_id: groupId }).whereIn('item_index', indexes).delete());
  }
  return statements;
}

export interface StoredReason {
  groupId: string;
  index: number;
  error: string;
  failedAt: number;
}

/** Where a page starts: after this reason in (failed_at, group_id, item_index) order. */
export interface ReasonCursor {
  failedAt: number;
  groupId: string;
  index: number;
}

/** A page of a batch's reasons, oldest first (one index range scan). No locks. */
export async function listReasons(q: Queryable, batchId: string, after: ReasonCursor | null, limit: number): Promise<StoredReason[]> {
  const query = q('failure_reasons')
    .where('batch_id', batchId)
    .orderBy([{ column: 'failed_at' }, { column: 'group_id' }, { column: 'item_index' }])
    .limit(limit);
  if (after) {
    query.where((w) =>
      w
        .where('failed_at', '>', after.failedAt)
        .orWhere((x) => x.where('failed_at', after.failedAt).where('group_id', '>', after.groupId))
        .orWhere((x) => x.where('failed_at', after.failedAt).where('group_id', after.groupId).where('item_index', '>', after.index)),
    );
  }
  const rows = await selectRows<ReasonRow>(q, query);
  return rows.map((row) => ({ groupId: row.group_id, index: Number(row.item_index), error: row.error, failedAt: Number(row.failed_at) }));
}
