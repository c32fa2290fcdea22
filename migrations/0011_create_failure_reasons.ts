import { Knex } from 'knex';

/**
 * Why items failed: at most FAILURE_REASONS_PER_BATCH rows per batch (the rest only counted in
 * batches.failures_dropped), keyed by batch first like item_groups. `first_failure_at` marks that
 * the batch's batch.first_failure moment has passed, so the event is written once.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('failure_reasons', (t) => {
    t.string('batch_id', 36).notNullable();
    t.string('group_id', 36).notNullable();
    t.integer('item_index').notNullable();
    t.string('error', 1000).notNullable();
    t.bigInteger('failed_at').notNullable();
    t.primary(['batch_id', 'group_id', 'item_index']);
    // Paging oldest first within a batch.
    t.index(['batch_id', 'failed_at', 'group_id', 'item_index'], 'failure_reasons_page');
  });
  await knex.schema.alterTable('batches', (t) => {
    t.bigInteger('failures_dropped').notNullable().defaultTo(0);
    t.bigInteger('first_failure_at').nullable();
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.dropColumn('failures_dropped');
    t.dropColumn('first_failure_at');
  });
  await knex.schema.dropTable('failure_reasons');
}
