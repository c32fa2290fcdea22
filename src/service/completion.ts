import { Knex } from 'knex';
import { v7 as uuidv7 } from 'uuid';
import { BatchRecord, toBatchView } from '../domain/batch';
import { completionEventBody } from '../domain/delivery';
import { Queryable } from '../store/db';
import { insertEventQuery } from '../store/outbox';
import { ServiceDeps } from './deps';

/**
 * The outbox inserts for the newly complete batches that have a callback URL, to run in the
 * transaction that completed them: the event exists if and only if the completion committed.
 */
export function completionEvents(q: Queryable, deps: ServiceDeps, completed: BatchRecord[]): Knex.QueryBuilder[] {
  return completed
    .filter((batch) => batch.callbackUrl)
    .map((batch) =>
      insertEventQuery(q, {
        id: uuidv7(),
        batchId: batch.id,
        tenant: batch.tenant,
        event: 'batch.completed',
        url: batch.callbackUrl as string,
        payload: completionEventBody(batch.tenant, toBatchView(batch)),
        createdAt: deps.now(),
      }),
    );
}

/** Runs completionEvents in `trx`. */
export async function recordCompletions(trx: Knex.Transaction, deps: ServiceDeps, completed: BatchRecord[]): Promise<void> {
  for (const insert of completionEvents(trx, deps, completed)) await insert;
}

/** Tells this process's listeners (waiters, the dispatcher) about completions after they committed. */
export function announceCompletions(deps: ServiceDeps, completed: BatchRecord[]): void {
  if (completed.length === 0) return;
  deps.observe.batchesCompleted(completed.length);
  deps.onCompleted?.(completed);
}
