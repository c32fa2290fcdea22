import { Knex } from 'knex';

import { isMysql } from './exactCollation';

/**
 * Lets the dispatcher's pass over held callback events (CallbackDispatcher.parkHeld) read the due
 * batch.completed and batch.cancelled events alone, a page at a time from where the last page
 * ended, as one index range. With `(status, next_attempt_at)` it walked every due
 * batch.first_failure too: 100,000 of them waiting behind a receiving host whose share is in use
 * were walked on every pass, once a second on each replica (found in a review).
 */
export async function up(knex: Knex): Promise<void> {
  if (isMysql(knex)) return void (await knex.raw('ALTER TABLE outbox ADD INDEX outbox_due_by_event (status, event, next_attempt_at, id)'));
  await knex.schema.alterTable('outbox', (t) => t.index(['status', 'event', 'next_attempt_at', 'id'], 'outbox_due_by_event'));
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('outbox', (t) => t.dropIndex(['status', 'event', 'next_attempt_at', 'id'], 'outbox_due_by_event'));
}
