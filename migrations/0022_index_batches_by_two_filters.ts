import { Knex } from 'knex';

import { isMysql } from './exactCollation';

/**
 * Lets a tenant's list with a userKey and a state (`?userKey=k&state=open`), or with a parent and a
 * state (`?parent=p&state=complete`), read those batches alone, newest first, as one index range.
 * Before, the store walked all of the tenant's batches with that key (tenant, user_key, id), or all
 * of the parent's children (parent_batch_id, id), to find the few in that state: a tenant with a
 * million complete batches keyed `k` made a list of its cancelled ones walk the million, holding a
 * pooled connection for seconds, per request (found in a review).
 */
export async function up(knex: Knex): Promise<void> {
  // One statement on MySQL/MariaDB, where each DDL statement commits alone (as 0020).
  if (isMysql(knex)) {
    return void (await knex.raw(
      'ALTER TABLE batches ADD INDEX batches_tenant_user_key_state (tenant, user_key, state, id), ADD INDEX batches_parent_state (parent_batch_id, state, id)',
    ));
  }
  await knex.schema.alterTable('batches', (t) => {
    t.index(['tenant', 'user_key', 'state', 'id'], 'batches_tenant_user_key_state');
    t.index(['parent_batch_id', 'state', 'id'], 'batches_parent_state');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.dropIndex(['tenant', 'user_key', 'state', 'id'], 'batches_tenant_user_key_state');
    t.dropIndex(['parent_batch_id', 'state', 'id'], 'batches_parent_state');
  });
}
