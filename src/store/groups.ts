import { Knex } from 'knex';
import { GroupRecord } from '../domain/ackPlan';
import { lockRows } from './batches';
import { Queryable } from './db';

interface GroupRow {
  batch_id: string;
  id: string;
  size: number;
  pending: number;
  succeeded_bits: Buffer | null;
  failed_bits: Buffer | null;
}

const fromRow = (row: GroupRow): GroupRecord => ({
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
export async function lockGroups(trx: Knex.Transaction, batchId: string, groupIds: string[]): Promise<GroupRecord[]> {
  const query = trx('item_groups').where('batch_id', batchId).whereIn('id', [...groupIds].sort()).orderBy('id');
  return ((await lockRows(trx, query)) as GroupRow[]).map(fromRow);
}

/** Reads the named groups of one batch without locking (for batches that can no longer change). */
export async function readGroups(q: Queryable, batchId: string, groupIds: string[]): Promise<GroupRecord[]> {
  const rows = (await q('item_groups').where('batch_id', batchId).whereIn('id', groupIds)) as GroupRow[];
  return rows.map(fromRow);
}

/**
 * Writes changed groups back in one statement (an upsert of rows this transaction holds locked,
 * so it only ever updates). One round trip for all groups an ack transaction touched.
 */
export async function writeGroups(trx: Knex.Transaction, groups: GroupRecord[]): Promise<void> {
  for (let i = 0; i < groups.length; i += INSERT_CHUNK) {
    await trx('item_groups')
      .insert(groups.slice(i, i + INSERT_CHUNK).map(toRow))
      .onConflict(['batch_id', 'id'])
      .merge(['pending', 'succeeded_bits', 'failed_bits']);
  }
}
