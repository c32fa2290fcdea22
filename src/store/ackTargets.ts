import { Knex } from 'knex';

import { groupKey,GroupRecord } from '../domain/ackPlan';
import { BatchRecord } from '../domain/batch';
import { batchFromRow, BatchRow, lockBatchesQuery, updateBatchQuery } from './batches';
import { Queryable } from './db';
import { groupFromRow, GroupRow, lockGroupsQueries, writeGroupsQueries } from './groups';

export interface AckTargets {
  batches: Map<string, BatchRecord>;
  /** By groupKey(batchId, groupId), as the ack planner looks them up. */
  groups: Map<string, GroupRecord>;
}

/**
 * The locking reads of an ack transaction, in the one lock order: the batch rows by id, then each
 * batch's named group rows by id. ackTargetsFrom reads their results.
 */
export function ackTargetReads(q: Queryable, groupIdsByBatch: Map<string, Set<string>>): Knex.QueryBuilder[] {
  const batchIds = [...groupIdsByBatch.keys()].sort();
  if (batchIds.length === 0) return [];
  return [lockBatchesQuery(q, batchIds), ...batchIds.flatMap((id) => lockGroupsQueries(q, id, groupIdsByBatch.get(id) ?? []))];
}

/** The rows ackTargetReads returned. Unknown batches and groups are simply absent. */
export function ackTargetsFrom(results: unknown[]): AckTargets {
  const [batchRows = [], ...groupRows] = results as [BatchRow[]?, ...GroupRow[][]];
  return {
    batches: new Map(batchRows.map((row) => [row.id, batchFromRow(row)])),
    groups: new Map(groupRows.flat().map((row) => [groupKey(row.batch_id, row.id), groupFromRow(row)])),
  };
}

/** The writes of the group rows and batch rows an ack transaction changed. */
export function ackTargetWrites(q: Queryable, groups: GroupRecord[], batches: BatchRecord[]): Knex.QueryBuilder[] {
  return [...writeGroupsQueries(q, groups), ...batches.map((batch) => updateBatchQuery(q, batch))];
}
