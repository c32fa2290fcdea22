import { Knex } from 'knex';
import { GroupRecord, groupKey } from '../domain/ackPlan';
import { BatchRecord } from '../domain/batch';
import { BatchRow, batchFromRow, lockBatchesQuery, updateBatchQuery } from './batches';
import { GroupRow, groupFromRow, lockGroupsQuery, writeGroupsQueries } from './groups';
import { runInOrder } from './statements';

export interface AckTargets {
  batches: Map<string, BatchRecord>;
  /** By groupKey(batchId, groupId), as the ack planner looks them up. */
  groups: Map<string, GroupRecord>;
}

/**
 * Reads and row-locks what an ack transaction touches, in the one lock order: the batch rows by id,
 * then each batch's named group rows by id. One round trip on MySQL. Unknown batches and groups are
 * simply absent.
 */
export async function lockAckTargets(trx: Knex.Transaction, groupIdsByBatch: Map<string, Set<string>>): Promise<AckTargets> {
  const batchIds = [...groupIdsByBatch.keys()].sort();
  if (batchIds.length === 0) return { batches: new Map(), groups: new Map() };
  const statements = [lockBatchesQuery(trx, batchIds), ...batchIds.map((id) => lockGroupsQuery(trx, id, groupIdsByBatch.get(id) ?? []))];
  const [batchRows, ...groupRows] = (await runInOrder(trx, statements)) as [BatchRow[], ...GroupRow[][]];
  return {
    batches: new Map(batchRows.map((row) => [row.id, batchFromRow(row)])),
    groups: new Map(groupRows.flat().map((row) => [groupKey(row.batch_id, row.id), groupFromRow(row)])),
  };
}

/** Writes back the group rows and batch rows an ack transaction changed, in one round trip on MySQL. */
export async function writeAckTargets(trx: Knex.Transaction, groups: GroupRecord[], batches: BatchRecord[]): Promise<void> {
  await runInOrder(trx, [...writeGroupsQueries(trx, groups), ...batches.map((batch) => updateBatchQuery(trx, batch))]);
}
