import { Knex } from 'knex';
import { AckCall, Rejection } from '../domain/ackCall';
import { GroupRecord, groupKey, planAcks } from '../domain/ackPlan';
import { BatchRecord, BatchView, toBatchView } from '../domain/batch';
import { lockBatches, updateBatch } from '../store/batches';
import { lockGroups, readGroups, writeGroups } from '../store/groups';
import { inTransaction } from '../store/transaction';
import { announceCompletions, recordCompletions } from './completion';
import { ServiceDeps } from './deps';

/** The Ack result of the HTTP contract. */
export interface AckResult {
  acked: number;
  duplicates: number;
  rejected: Rejection[];
  completed: BatchView[];
}

/** The group ids each batch of these calls names. */
function groupIdsByBatch(calls: AckCall[]): Map<string, Set<string>> {
  const byBatch = new Map<string, Set<string>>();
  for (const call of calls) {
    for (const target of call.targets) {
      let ids = byBatch.get(target.batchId);
      if (!ids) byBatch.set(target.batchId, (ids = new Set()));
      ids.add(target.groupId);
    }
  }
  return byBatch;
}

/**
 * Loads what the calls touch, in the one lock order: batch rows by id, then each batch's group rows
 * by id. Groups of a complete batch are only read: nothing of theirs will change.
 */
async function loadTouched(trx: Knex.Transaction, calls: AckCall[]) {
  const wanted = groupIdsByBatch(calls);
  const batches = await lockBatches(trx, [...wanted.keys()]);
  const groups = new Map<string, GroupRecord>();
  for (const batch of batches.values()) {
    const ids = [...(wanted.get(batch.id) ?? [])];
    const rows = batch.state === 'complete' ? await readGroups(trx, batch.id, ids) : await lockGroups(trx, batch.id, ids);
    for (const group of rows) groups.set(groupKey(group.batchId, group.id), group);
  }
  return { batches, groups };
}

/**
 * Applies ack calls in one transaction: one locked read and one write per touched group row, one
 * write per touched batch row, whatever the number of IDs. Returns each call's own result, in order.
 * Completion happens here, under the batch row lock, at most once per batch.
 */
export async function ackItems(deps: ServiceDeps, calls: AckCall[]): Promise<AckResult[]> {
  const { results, completed } = await inTransaction(deps.db, deps.tx, async (trx) => {
    const { batches, groups } = await loadTouched(trx, calls);
    const plan = planAcks(calls, batches, groups, deps.now());
    await writeGroups(trx, plan.groupWrites);
    for (const batch of plan.batchWrites) await updateBatch(trx, batch);
    // A batch written here and complete now became complete in this transaction (complete ones are never written).
    const newlyComplete = plan.batchWrites.filter((b) => b.state === 'complete');
    await recordCompletions(trx, deps, newlyComplete);
    return { results: plan.results, completed: new Map<string, BatchRecord>(newlyComplete.map((b) => [b.id, b])) };
  });
  announceCompletions(deps, [...completed.values()]);
  results.forEach((r, i) => deps.observe.ackResult(calls[i]!.outcome, r.acked, r.duplicates, r.rejected.length));
  return results.map((result) => ({
    acked: result.acked,
    duplicates: result.duplicates,
    rejected: result.rejected,
    completed: result.completedBatchIds.map((id) => toBatchView(completed.get(id) as BatchRecord)),
  }));
}
