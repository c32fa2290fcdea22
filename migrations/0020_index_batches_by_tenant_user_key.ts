import { Knex } from 'knex';

import { isPostgres } from './citus';
import { isMysql } from './exactCollation';

/**
 * Lets a tenant's list of batches with one userKey (`GET /v1/batches?userKey=`, the dashboard's
 * filter, polled every second) read those batches alone, newest first, as one index range. Before,
 * the store walked either the tenant's batches (tenant, id), all of them when few or none had the
 * key, or every tenant's batches with that key (user_key, id): a neighbour's thousands of `nightly`
 * batches set the cost of this tenant's listing. Nothing else reads (user_key, id) (every read names
 * its tenant, since 0006): it goes, and each batch's insert writes one index less.
 *
 * PostgreSQL's planner takes a tenant and a key for independent: with a key that most of a
 * neighbour's batches have and few of this tenant's, it guessed thousands of matches and walked the
 * newest batches of every tenant (the primary key) instead, hoping to meet 50 soon. Statistics of
 * the two together (their most common pairs, `ANALYZE` keeps them current; Citus passes them on to
 * its shards) let it count them.
 */
export async function up(knex: Knex): Promise<void> {
  // One statement on MySQL/MariaDB, where each DDL statement commits alone: cut off between two
  // (a lock wait past LOCK_TIMEOUT), the migration, run again, would fail for good on the new name.
  if (isMysql(knex))
    return void (await knex.raw('ALTER TABLE batches ADD INDEX batches_tenant_user_key (tenant, user_key, id), DROP INDEX batches_user_key_id'));
  await knex.schema.alterTable('batches', (t) => {
    t.index(['tenant', 'user_key', 'id'], 'batches_tenant_user_key');
  });
  await knex.schema.alterTable('batches', (t) => {
    t.dropIndex(['user_key', 'id'], 'batches_user_key_id');
  });
  if (isPostgres(knex)) await knex.raw('CREATE STATISTICS IF NOT EXISTS batches_tenant_user_key_pairs (mcv) ON tenant, user_key FROM batches');
}

export async function down(knex: Knex): Promise<void> {
  if (isPostgres(knex)) await knex.raw('DROP STATISTICS IF EXISTS batches_tenant_user_key_pairs');
  await knex.schema.alterTable('batches', (t) => {
    t.index(['user_key', 'id'], 'batches_user_key_id');
  });
  await knex.schema.alterTable('batches', (t) => {
    t.dropIndex(['tenant', 'user_key', 'id'], 'batches_tenant_user_key');
  });
}
