import { Knex } from 'knex';
import { v7 as uuidv7 } from 'uuid';
import { BatchRecord, toBatchView } from '../domain/batch';
import { completionEventBody } from '../domain/delivery';
import { insertEvent } from '../store/outbox';
import { ServiceDeps } from './deps';

/**
 * Writes the outbox event of each newly complete batch that has a callback URL, in the transaction
 * that completed it: the event exists if and only if the completion committed.
 */
export async function recordCompletions(trx: Knex.Transaction, deps: ServiceDeps, completed: BatchRecord[]): Promise<void> {
  for (const batch of completed) {
    if (!batch.callbackUrl) continue;
    await insertEvent(trx, {
      id: uuidv7(),
      batchId: batch.id,
      event: 'batch.completed',
      url: batch.callbackUrl,
      payload: completionEventBody(toBatchView(batch)),
      createdAt: deps.now(),
    });
  }
}

/** Tells this process's listeners (waiters, the dispatcher) about completions after they committed. */
export function announceCompletions(deps: ServiceDeps, completed: BatchRecord[]): void {
  if (completed.length === 0) return;
  deps.observe.batchesCompleted(completed.length);
  deps.onCompleted?.(completed);
}
