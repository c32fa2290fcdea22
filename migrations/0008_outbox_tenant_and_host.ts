import { Knex } from 'knex';

import { exactCollation, exactString } from './exactCollation';

/**
 * Each callback event names its batch's tenant (whose callbackSecret signs it) and the host it goes
 * to, so the dispatcher can share its deliveries fairly among tenants and receiving hosts
 * (API.md, "Callbacks in a multi-tenant service"); the tenant compares exactly. Events written before this migration are
 * filled in from their batch and URL.
 */
export async function up(knex: Knex): Promise<void> {
  const collation = await exactCollation(knex);
  await knex.schema.alterTable('outbox', (t) => {
    // Exact, like batches.tenant: the fair-share filter must not take `acme` for a saturated `Acme`.
    exactString(t, 'tenant', 64, collation).notNullable().defaultTo('');
    t.string('host', 255).notNullable().defaultTo('');
  });
  const rows = (await knex('outbox').join('batches', 'batches.id', 'outbox.batch_id').select('outbox.id', 'outbox.url', 'batches.tenant')) as Array<{
    id: string;
    url: string;
    tenant: string;
  }>;
  for (const row of rows) {
    await knex('outbox')
      .where({ id: row.id })
      .update({ tenant: row.tenant, host: hostOf(row.url) });
  }
}

function hostOf(url: string): string {
  try {
    return new URL(url).host.toLowerCase();
  } catch {
    return '';
  }
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('outbox', (t) => {
    t.dropColumn('tenant');
    t.dropColumn('host');
  });
}
