import { Knex } from 'knex';

/**
 * A child batch stands for one item of its parent. `parent_item` is unique (one child per item;
 * NULL for roots, which a unique index does not compare); `parent_batch_id` lists a batch's children.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.string('parent_item', 96).nullable();
    t.string('parent_batch_id', 36).nullable();
    t.unique(['parent_item'], { indexName: 'batches_parent_item' });
    t.index(['parent_batch_id', 'id'], 'batches_parent_id');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.dropUnique(['parent_item'], 'batches_parent_item');
    t.dropIndex(['parent_batch_id', 'id'], 'batches_parent_id');
  });
  await knex.schema.alterTable('batches', (t) => {
    t.dropColumn('parent_item');
    t.dropColumn('parent_batch_id');
  });
}
