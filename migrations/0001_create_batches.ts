import { Knex } from 'knex';

/** One row per batch: its state and exact counters. Times are epoch milliseconds. */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('batches', (t) => {
    t.string('id', 36).primary();
    t.string('state', 16).notNullable();
    t.string('user_key', 255).nullable();
    t.text('metadata').nullable();
    t.string('callback_url', 2048).nullable();
    t.bigInteger('total').notNullable().defaultTo(0);
    t.bigInteger('succeeded').notNullable().defaultTo(0);
    t.bigInteger('failed').notNullable().defaultTo(0);
    t.integer('open_groups').notNullable().defaultTo(0);
    t.bigInteger('created_at').notNullable();
    t.bigInteger('updated_at').notNullable();
    t.bigInteger('sealed_at').nullable();
    t.bigInteger('completed_at').nullable();
    // Listings filter by state or userKey and page newest first by id (UUIDv7, creation order).
    t.index(['state', 'id'], 'batches_state_id');
    t.index(['user_key', 'id'], 'batches_user_key_id');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('batches');
}
