import { Knex } from 'knex';
import { GroupRecord } from '../domain/ackPlan';
import { lockRows } from './batches';
import { Queryable } from './db';
import { selectRows } from './mysqlDriver';

export interface GroupRow {
  batch_id: string;
  id: string;
  size: number;
  pending: number;
  succeeded_bits: Buffer | null;
  failed_bits: Buffer | null;
}

export const groupFromRow = (row: GroupRow): GroupRecord => ({
  batchId: row.batch_id,
  id: row.id,
  size: Number(row.size),
  pending: Number(row.pending),
  succeededBits: row.succeeded_bits,
  failedBits: row.failed_bits,
});

const toRow = (group: GroupRecord): GroupRow => ({
  batch_id: group.batchId,
  id: group.id,
  size: group.size,
  pending: group.pending,
  succeeded_bits: group.succeededBits,
  failed_bits: group.failedBits,
});

/** Rows per INSERT: 1,221 groups of a 10M-item add go in three statements. */
const INSERT_CHUNK = 500;

/** Inserts new, all-pending groups. Locks: the new rows. */
export async function insertGroups(trx: Knex.Transaction, groups: GroupRecord[]): Promise<void> {
  for (let i = 0; i < groups.length; i += INSERT_CHUNK) {
    await trx('item_groups').insert(groups.slice(i, i + INSERT_CHUNK).map(toRow));
  }
}

/** Reads and row-locks the named groups of one batch, in id order. Unknown ids are absent. */
export function lockGroupsQuery(q: Queryable, batchId: string, groupIds: Iterable<string>): Knex.QueryBuilder {
  return lockRows(q, q('item_groups').where('batch_id', batchId).whereIn('id', [...groupIds].sort()).orderBy('id'));
}

/**
 * Writes changed groups back (upserts of rows this transaction holds locked, so they only ever
 * update): one statement per INSERT_CHUNK groups, whatever the number of IDs acked in them.
 */
export function writeGroupsQueries(q: Queryable, groups: GroupRecord[]): Knex.QueryBuilder[] {
  const statements: Knex.QueryBuilder[] = [];
  for (let i = 0; i < groups.length; i += INSERT_CHUNK) {
    statements.push(
      q('item_groups')
        .insert(groups.slice(i, i + INSERT_CHUNK).map(toRow))
        .onConflict(['batch_id', 'id'])
        .merge(['pending', 'succeeded_bits', 'failed_bits']),
    );
  }
  return statements;
}

/** Reads one group without locking; null when the batch has no such group. */
export async function findGroup(q: Queryable, batchId: string, groupId: string): Promise<GroupRecord | null> {
  const [row] = await selectRows<GroupRow>(q, q('item_groups').where({ batch_id: batchId, id: groupId }));
  return row ? groupFromRow(row) : null;
}
