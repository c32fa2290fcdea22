import { v7 as uuidv7 } from 'uuid';

import { toBatchView } from '../contract/batchView';
import { BatchRecord } from '../domain/batch';
import { batchEventBody } from '../domain/delivery';
import { FinishRows, insertFinishRows } from '../store/ackTransaction';
import { NewChildOutcome } from '../store/childOutcomes';
import { Transaction } from '../store/db';
import { NewEvent } from '../store/outbox';
import { ServiceDeps } from './deps';

/** The error a parent item gets when its child batch ends other than succeeded. */
export const CHILD_FAILED = 'child batch failed';
export const CHILD_CANCELLED = 'child batch cancelled';

/** The callback of a batch that has just finished: batch.completed, or batch.cancelled. */
function finishEvent(deps: ServiceDeps, batch: BatchRecord): NewEvent {
  const event = batch.state === 'cancelled' ? 'batch.cancelled' : 'batch.completed';
  return {
    id: uuidv7(),
    batchId: batch.id,
    tenant: batch.tenant,
    event,
    url: batch.callbackUrl as string,
    payload: batchEventBody(event, batch.tenant, toBatchView(batch)),
    createdAt: deps.now(),
  };
}

/**
 * What a child batch's end means for its parent item, written beside the child's end (the outbox
 * way: no transaction spans two batches); the ChildOutcomeDispatcher acks the parent item from it.
 */
function childOutcome(deps: ServiceDeps, batch: BatchRecord): NewChildOutcome {
  const succeeded = batch.state === 'complete' && batch.failed === 0;
  return {
    batchId: batch.id,
    tenant: batch.tenant,
    parentItem: batch.parentItem as string,
    outcome: succeeded ? 'succeeded' : 'failed',
    error: succeeded ? null : batch.state === 'cancelled' ? CHILD_CANCELLED : CHILD_FAILED,
    createdAt: deps.now(),
  };
}

/**
 * The rows that the end of these batches (complete or cancelled) writes, to run in the transaction
 * that ended them: the callback event and the parent's pending ack exist if and only if the end committed.
 */
export function finishRows(deps: ServiceDeps, finished: BatchRecord[]): FinishRows {
  return {
    events: finished.filter((batch) => batch.callbackUrl).map((batch) => finishEvent(deps, batch)),
    childOutcomes: finished.filter((batch) => batch.parentItem).map((batch) => childOutcome(deps, batch)),
  };
}

/** Writes finishRows in `trx`. */
export async function recordCompletions(trx: Transaction, deps: ServiceDeps, completed: BatchRecord[]): Promise<void> {
  await insertFinishRows(trx, finishRows(deps, completed));
}

/** Tells this process's listeners (waiters, the dispatchers) about completions after they committed. */
export function announceCompletions(deps: ServiceDeps, completed: BatchRecord[]): void {
  if (completed.length === 0) return;
  deps.observe.batchesCompleted(completed.length);
  deps.onCompleted?.(completed);
}
