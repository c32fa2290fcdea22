import { Knex } from 'knex';

/**
 * Completion events waiting for (or done with) callback delivery. A row is written in the same
 * transaction that completes the batch; the dispatcher claims due rows with a lease.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('outbox', (t) => {
    t.string('id', 36).primary(); // the event id, sent as X-Rollcall-Event-Id on every attempt
    t.string('batch_id', 36).notNullable();
    t.string('event', 64).notNullable();
    t.string('url', 2048).notNullable();
    t.text('payload', 'mediumtext').notNullable(); // the exact body that is signed and sent
    t.string('status', 16).notNullable(); // pending | delivered | dead
    t.integer('attempts').notNullable().defaultTo(0);
    t.bigInteger('next_attempt_at').notNullable();
    t.string('claim', 36).nullable(); // who holds the lease until next_attempt_at
    t.bigInteger('last_attempt_at').nullable();
    t.string('last_error', 1024).nullable();
    t.bigInteger('delivered_at').nullable();
    t.bigInteger('created_at').notNullable();
    t.index(['status', 'next_attempt_at'], 'outbox_due');
    t.index(['batch_id'], 'outbox_batch');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('outbox');
}
