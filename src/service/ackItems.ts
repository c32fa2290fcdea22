import { AckCall, Rejection } from '../domain/ackCall';
import { CallResult, planAcks } from '../domain/ackPlan';
import { BatchRecord, BatchView, Outcome, toBatchView } from '../domain/batch';
import { ackTargetReads, ackTargetsFrom, ackTargetWrites } from '../store/ackTargets';
import { readDecideWrite } from '../store/readDecideWrite';
import { announceCompletions, completionEvents } from './completion';
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

/** Counts a transaction's acks once per outcome, not once per call: every metrics update hashes its labels. */
function observeResults(deps: ServiceDeps, calls: AckCall[], results: CallResult[]): void {
  const totals = new Map<Outcome, { acked: number; duplicates: number; rejected: number }>();
  results.forEach((result, i) => {
    const outcome = calls[i]!.outcome;
    let total = totals.get(outcome);
    if (!total) totals.set(outcome, (total = { acked: 0, duplicates: 0, rejected: 0 }));
    total.acked += result.acked;
    total.duplicates += result.duplicates;
    total.rejected += result.rejected.length;
  });
  for (const [outcome, total] of totals) deps.observe.ackResult(outcome, total.acked, total.duplicates, total.rejected);
}

/**
 * Applies ack calls in one transaction: one locked read and one write per touched group row, one
 * write per touched batch row, whatever the number of IDs. Returns each call's own result, in order.
 * Completion happens here, under the batch row lock, at most once per batch.
 */
export async function ackItems(deps: ServiceDeps, calls: AckCall[]): Promise<AckResult[]> {
  const { results, completed } = await readDecideWrite(deps.db, deps.tx, {
    reads: (q) => ackTargetReads(q, groupIdsByBatch(calls)),
    decide(q, rows) {
      const { batches, groups } = ackTargetsFrom(rows);
      const plan = planAcks(calls, batches, groups, deps.now());
      // A batch written here and complete now became complete in this transaction (complete ones are never written).
      const newlyComplete = plan.batchWrites.filter((b) => b.state === 'complete');
      return {
        writes: [...ackTargetWrites(q, plan.groupWrites, plan.batchWrites), ...completionEvents(q, deps, newlyComplete)],
        answer: { results: plan.results, completed: new Map<string, BatchRecord>(newlyComplete.map((b) => [b.id, b])) },
      };
    },
  });
  announceCompletions(deps, [...completed.values()]);
  observeResults(deps, calls, results);
  return results.map((result) => ({
    acked: result.acked,
    duplicates: result.duplicates,
    rejected: result.rejected,
    completed: result.completedBatchIds.map((id) => toBatchView(completed.get(id) as BatchRecord)),
  }));
}
