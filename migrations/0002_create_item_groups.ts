import { Knex } from 'knex';

/**
 * One row per group of up to GROUP_SIZE items. Keyed by batch first so a batch's groups sit
 * together and "does this group belong to that batch" is a primary-key lookup. Bit columns stay
 * NULL while all zero, so a fresh group costs no bitfield bytes at all.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('item_groups', (t) => {
    t.string('batch_id', 36).notNullable();
    t.string('id', 36).notNullable();
    t.integer('size').notNullable();
    t.integer('pending').notNullable();
    t.binary('succeeded_bits').nullable();
    t.binary('failed_bits').nullable();
    t.primary(['batch_id', 'id']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('item_groups');
}
