import { v7 as uuidv7 } from 'uuid';

import { toBatchView } from '../contract/batchView';
import { AckResult } from '../contract/responses';
import { AckCall } from '../domain/ackCall';
import { AckPlan, CallResult, planAcks } from '../domain/ackPlan';
import { BatchRecord, Outcome } from '../domain/batch';
import { batchEventBody } from '../domain/delivery';
import { batchesNamedByFailures, reasonTime, runsNamedByFailures } from '../domain/failureReasons';
import { runAckTransaction } from '../store/ackTransaction';
import { NewEvent } from '../store/outbox';
import { announceCompletions, finishRows } from './completion';
import { ServiceDeps } from './deps';

export type { AckResult };

/** The group ids each batch of these calls names (not batches known to be others'). */
function groupIdsByBatch(calls: AckCall[]): Map<string, Set<string>> {
  const byBatch = new Map<string, Set<string>>();
  for (const call of calls) {
    for (const target of call.targets) {
      if (target.foreign) continue;
      let ids = byBatch.get(target.batchId);
      if (!ids) byBatch.set(target.batchId, (ids = new Set()));
      ids.add(target.groupId);
    }
  }
  return byBatch;
}

/** The batch.first_failure events of batches with a callback URL. */
function firstFailureEvents(plan: AckPlan, now: number): NewEvent[] {
  const written = new Map(plan.batchWrites.map((b) => [b.id, b]));
  const events: NewEvent[] = [];
  for (const first of plan.firstFailures) {
    const batch = written.get(first.batchId);
    if (!batch?.callbackUrl) continue;
    events.push({
      id: uuidv7(),
      batchId: batch.id,
      tenant: batch.tenant,
      event: 'batch.first_failure',
      url: batch.callbackUrl,
      payload: batchEventBody('batch.first_failure', batch.tenant, toBatchView(batch), { itemId: first.itemId, error: first.error }),
      createdAt: now,
    });
  }
  return events;
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
  const reads = { groupIdsByBatch: groupIdsByBatch(calls), reasonBatches: batchesNamedByFailures(calls), reasonRuns: runsNamedByFailures(calls) };
  const { results, completed } = await runAckTransaction(deps.db, deps.tx, reads, ({ batches, groups, storedReasons }) => {
    const now = deps.now();
    const plan = planAcks(calls, batches, groups, now, { stored: storedReasons, cap: deps.failureReasonsPerBatch });
    // A batch written here and complete now became complete in this transaction (complete ones are never written).
    const newlyComplete = plan.batchWrites.filter((b) => b.state === 'complete');
    const finished = finishRows(deps, newlyComplete);
    return {
      writes: {
        groups: plan.groupWrites,
        batches: plan.batchWrites,
        reasons: plan.reasonWrites.map((write) => ({ ...write, at: reasonTime(now, storedReasons.get(write.batchId)?.newest) })),
        events: [...firstFailureEvents(plan, now), ...finished.events],
        childOutcomes: finished.childOutcomes,
      },
      answer: { results: plan.results, completed: new Map<string, BatchRecord>(newlyComplete.map((b) => [b.id, b])) },
    };
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
