import { v7 as uuidv7 } from 'uuid';

import { BatchRecord, toBatchView } from '../domain/batch';
import { batchEventBody } from '../domain/delivery';
import { insertChildOutcomeQuery } from '../store/childOutcomes';
import { Queryable, Statement, Transaction } from '../store/db';
import { insertEventQuery } from '../store/outbox';
import { ServiceDeps } from './deps';

/** The error a parent item gets when its child batch ends other than succeeded. */
export const CHILD_FAILED = 'child batch failed';
export const CHILD_CANCELLED = 'child batch cancelled';

/** The callback of a batch that has just finished: batch.completed, or batch.cancelled. */
function finishEvent(q: Queryable, deps: ServiceDeps, batch: BatchRecord): Statement {
  const view = toBatchView(batch);
  const cancelledNow = batch.state === 'cancelled';
  return insertEventQuery(q, {
    id: uuidv7(),
    batchId: batch.id,
    tenant: batch.tenant,
    event: cancelledNow ? 'batch.cancelled' : 'batch.completed',
    url: batch.callbackUrl as string,
    payload: batchEventBody(cancelledNow ? 'batch.cancelled' : 'batch.completed', batch.tenant, view),
    createdAt: deps.now(),
  });
}

/**
 * What a child batch's end means for its parent item, written beside the child's end (the outbox
 * way: no transaction spans two batches); the ChildOutcomeDispatcher acks the parent item from it.
 */
function childOutcome(q: Queryable, deps: ServiceDeps, batch: BatchRecord): Statement {
  const succeeded = batch.state === 'complete' && batch.failed === 0;
  return insertChildOutcomeQuery(
    q,
    {
      batchId: batch.id,
      tenant: batch.tenant,
      parentItem: batch.parentItem as string,
      outcome: succeeded ? 'succeeded' : 'failed',
      error: succeeded ? null : batch.state === 'cancelled' ? CHILD_CANCELLED : CHILD_FAILED,
    },
    deps.now(),
  );
}

/**
 * The rows that the end of these batches (complete or cancelled) writes, to run in the transaction
 * that ended them: the callback event and the parent's pending ack exist if and only if the end committed.
 */
export function completionEvents(q: Queryable, deps: ServiceDeps, finished: BatchRecord[]): Statement[] {
  const writes: Statement[] = [];
  for (const batch of finished) {
    if (batch.callbackUrl) writes.push(finishEvent(q, deps, batch));
    if (batch.parentItem) writes.push(childOutcome(q, deps, batch));
  }
  return writes;
}

/** Runs completionEvents in `trx`. */
export async function recordCompletions(trx: Transaction, deps: ServiceDeps, completed: BatchRecord[]): Promise<void> {
  for (const insert of completionEvents(trx, deps, completed)) await insert;
}

/** Tells this process's listeners (waiters, the dispatchers) about completions after they committed. */
export function announceCompletions(deps: ServiceDeps, completed: BatchRecord[]): void {
  if (completed.length === 0) return;
  deps.observe.batchesCompleted(completed.length);
  deps.onCompleted?.(completed);
}
