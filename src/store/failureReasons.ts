import { Knex } from 'knex';

import { reasonKey, ReasonPlan } from '../domain/failureReasons';
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
export interface StoredReasons {
  keys: Set<string>;
  /** The newest `failed_at` among them (0 for none): the reasons it writes are stamped later (reasonTime). */
  newest: number;
}

/**
 * The keys of a batch's stored reasons (at most the cap, so a bounded read), for batches named by
 * failures with an error. Read in the ack transaction after its batch row is locked, and every
 * writer of a batch's reasons holds that lock: so a plain read (its snapshot taken after the lock
 * was granted) already sees every committed reason. A locking read would add next-key locks that
 * reach into the neighbouring batch's key range, and make ack transactions of unrelated batches
 * wait for (or deadlock with) each other.
 */
export function reasonKeysQuery(q: Queryable, batchId: string): Knex.QueryBuilder {
  return q('failure_reasons').select('group_id', 'item_index', 'failed_at').where('batch_id', batchId);
}

/** The keys and newest time of reasonKeysQuery's rows. */
export function storedReasonsFrom(rows: unknown): StoredReasons {
  const keys = new Set<string>();
  let newest = 0;
  for (const row of rows as Array<ReasonKeyRow & Pick<ReasonRow, 'failed_at'>>) {
    keys.add(reasonKey(row.group_id, Number(row.item_index)));
    newest = Math.max(newest, Number(row.failed_at));
  }
  return { keys, newest };
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
