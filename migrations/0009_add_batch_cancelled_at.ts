import { Knex } from 'knex';

/** When a batch was cancelled (terminal, like complete); the sweeper finds old ones by (state, cancelled_at). */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.bigInteger('cancelled_at').nullable();
    t.index(['state', 'cancelled_at'], 'batches_state_cancelled');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.dropIndex(['state', 'cancelled_at'], 'batches_state_cancelled');
  });
  await knex.schema.alterTable('batches', (t) => {
    t.dropColumn('cancelled_at');
  });
}
