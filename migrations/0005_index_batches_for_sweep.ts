import { Knex } from 'knex';

/** Lets the sweeper find stale open batches and old complete ones by range scans. */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.index(['state', 'updated_at'], 'batches_state_updated');
    t.index(['state', 'completed_at'], 'batches_state_completed');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.dropIndex(['state', 'updated_at'], 'batches_state_updated');
    t.dropIndex(['state', 'completed_at'], 'batches_state_completed');
  });
}
