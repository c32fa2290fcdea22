import { Knex } from 'knex';

/**
 * One child per parent item, kept by a row keyed by the parent (batch, item) instead of the unique
 * index on batches.parent_item alone: on Citus a unique key must hold the distribution column, and
 * batches are distributed by their own id (migration 0014), so only a key that starts with the
 * parent's batch id can still refuse a second child. The link is written in the child's creating
 * transaction; filled here from the children that exist.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('child_links', (t) => {
    t.string('parent_batch_id', 36).notNullable();
    t.string('parent_item', 96).notNullable();
    t.string('child_batch_id', 36).notNullable();
    t.primary(['parent_batch_id', 'parent_item']);
  });
  await knex
    .insert((select: Knex.QueryBuilder) => select.from('batches').select('parent_batch_id', 'parent_item', 'id').whereNotNull('parent_item'))
    .into(knex.raw('?? (??, ??, ??)', ['child_links', 'parent_batch_id', 'parent_item', 'child_batch_id']));
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('child_links');
}
