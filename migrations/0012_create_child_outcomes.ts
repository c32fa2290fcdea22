import { Knex } from 'knex';

import { exactCollation, exactString } from './exactCollation';

/**
 * Outcomes of finished child batches waiting to be acked into their parent item. A row is written
 * in the child's completing (or cancelling) transaction, keyed by the child's id (so that
 * transaction stays on one batch), and deleted once the parent item's ack has committed.
 */
export async function up(knex: Knex): Promise<void> {
  const collation = await exactCollation(knex);
  await knex.schema.createTable('child_outcomes', (t) => {
    t.string('batch_id', 36).primary(); // the child: one outcome per child, ever
    exactString(t, 'tenant', 64, collation).notNullable();
    t.string('parent_item', 96).notNullable();
    t.string('outcome', 16).notNullable(); // succeeded | failed
    t.string('error', 1000).nullable();
    t.bigInteger('next_attempt_at').notNullable();
    t.string('claim', 36).nullable();
    t.integer('attempts').notNullable().defaultTo(0);
    t.bigInteger('created_at').notNullable();
    t.index(['next_attempt_at'], 'child_outcomes_due');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('child_outcomes');
}
