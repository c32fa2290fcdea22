import { Knex } from 'knex';

/** Batches belong to the tenant whose token created them ('' when the service runs without tokens). */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.string('tenant', 64).notNullable().defaultTo('');
    t.index(['tenant', 'id'], 'batches_tenant_id');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.dropIndex(['tenant', 'id'], 'batches_tenant_id');
  });
  await knex.schema.alterTable('batches', (t) => {
    t.dropColumn('tenant');
  });
}
