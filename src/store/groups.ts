import { Knex } from 'knex';

import { GroupRecord } from '../domain/ackPlan';
import { Queryable } from './db';
import { forUpdate } from './dialect';
import { selectRows } from './readDecideWrite';

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

/** A group as its row's columns. */
export const groupRow = (group: GroupRecord): GroupRow => ({
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
    await trx('item_groups').insert(groups.slice(i, i + INSERT_CHUNK).map(groupRow));
  }
}

/** Group ids per locking read: 5,000 UUIDs are ~200 KB of SQL, and SQLite binds at most 32,766 values. */
const LOCK_CHUNK = 5000;

/**
 * Reads and row-locks the named groups of one batch, in id order (a statement per LOCK_CHUNK ids,
 * still in that order). Unknown ids are absent.
 */
export function lockGroupsQueries(q: Queryable, batchId: string, groupIds: Iterable<string>): Knex.QueryBuilder[] {
  const sorted = [...groupIds].sort();
  const statements: Knex.QueryBuilder[] = [];
  for (let i = 0; i < sorted.length; i += LOCK_CHUNK) {
    statements.push(
      forUpdate(
        q,
        q('item_groups')
          .where('batch_id', batchId)
          .whereIn('id', sorted.slice(i, i + LOCK_CHUNK))
          .orderBy('id'),
      ),
    );
  }
  return statements;
}

/** The most escaped bytes one upsert statement carries: far below any server's max_allowed_packet. */
const WRITE_STATEMENT_BYTES = 1024 * 1024;

/** Bytes a group row takes as escaped SQL: its bitfields in hex, plus ids and counters. */
const rowBytes = (group: GroupRecord) => 2 * ((group.succeededBits?.length ?? 0) + (group.failedBits?.length ?? 0)) + 128;

/**
 * Writes changed groups back (upserts of rows this transaction holds locked, so they only ever
 * update): a statement per INSERT_CHUNK groups or WRITE_STATEMENT_BYTES, whichever comes first,
 * whatever the number of IDs acked in them.
 */
export function writeGroupsQueries(q: Queryable, groups: GroupRecord[]): Knex.QueryBuilder[] {
  const statements: Knex.QueryBuilder[] = [];
  const write = (rows: GroupRecord[]) =>
    statements.push(q('item_groups').insert(rows.map(groupRow)).onConflict(['batch_id', 'id']).merge(['pending', 'succeeded_bits', 'failed_bits']));
  let chunk: GroupRecord[] = [];
  let bytes = 0;
  for (const group of groups) {
    if (chunk.length === INSERT_CHUNK || (chunk.length > 0 && bytes + rowBytes(group) > WRITE_STATEMENT_BYTES)) {
      write(chunk);
      [chunk, bytes] = [[], 0];
    }
    chunk.push(group);
    bytes += rowBytes(group);
  }
  if (chunk.length > 0) write(chunk);
  return statements;
}

/** Reads one group without locking; null when the batch has no such group. */
export async function findGroup(q: Queryable, batchId: string, groupId: string): Promise<GroupRecord | null> {
  const [row] = await selectRows<GroupRow>(q, q('item_groups').where({ batch_id: batchId, id: groupId }));
  return row ? groupFromRow(row) : null;
}
