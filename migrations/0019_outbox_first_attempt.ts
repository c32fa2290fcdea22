import { Knex } from 'knex';

/**
 * When an event was first tried. CALLBACK_MAX_AGE counts from it, not from the event's creation:
 * an event held back (a parent's batch.completed behind a child's failing event, a terminal event
 * behind its batch.first_failure) or left untried while no replica ran was older than the limit at
 * its first attempt, and one failure gave it up. Events already tried keep their creation as the
 * start, as before.
 */
export async function up(knex: Knex): Promise<void> {
  // On MySQL/MariaDB the ALTER commits alone: a run whose UPDATE then failed (a lock wait past
  // LOCK_TIMEOUT on a busy outbox) is run again, and must find the column there, not fail on it.
  if (!(await knex.schema.hasColumn('outbox', 'first_attempt_at')))
    await knex.schema.alterTable('outbox', (t) => {
      t.bigInteger('first_attempt_at').nullable();
    });
  await knex('outbox')
    .where('status', 'pending')
    .where('attempts', '>', 0)
    .update({ first_attempt_at: knex.ref('created_at') });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('outbox', (t) => {
    t.dropColumn('first_attempt_at');
  });
}
