import { Knex } from 'knex';

/**
 * Lets the tenant quota read a tenant's unfinished batches and their items (service/tenantQuota.ts)
 * from this index alone, without walking the tenant's finished batches (kept for
 * COMPLETED_RETENTION). `id` before `total` also serves the list of a tenant's batches in one state,
 * newest first, as an index range in order.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.index(['tenant', 'state', 'id', 'total'], 'batches_tenant_state');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.dropIndex(['tenant', 'state', 'id', 'total'], 'batches_tenant_state');
  });
}
