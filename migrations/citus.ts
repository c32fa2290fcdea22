import { Knex } from 'knex';

export const isPostgres = (knex: Knex): boolean => ['pg', 'postgres', 'postgresql'].includes(knex.client.config.client as string);

/**
 * Citus (sharded PostgreSQL): the migrations distribute rollcall's batch-scoped tables when the
 * database has the `citus` extension. Not a migration: a helper of them.
 */
export async function onCitus(knex: Knex): Promise<boolean> {
  if (!isPostgres(knex)) return false;
  const rows = (await knex('pg_extension').select('extname').where('extname', 'citus')) as unknown[];
  return rows.length > 0;
}

/**
 * Every batch-scoped table and the column it is sharded by: the batch id, so one batch's rows live
 * on one shard and every hot-path statement (which names its batch) goes to one worker. Co-located
 * with `batches`: joins and transactions on one batch stay on one node. child_links is keyed by the
 * parent batch (it guards the parent's items). Local (on the coordinator): the migration tables.
 */
export const DISTRIBUTED_TABLES: ReadonlyArray<readonly [table: string, column: string]> = [
  ['batches', 'id'],
  ['item_groups', 'batch_id'],
  ['add_requests', 'batch_id'],
  ['outbox', 'batch_id'],
  ['failure_reasons', 'batch_id'],
  ['child_outcomes', 'batch_id'],
  ['child_links', 'parent_batch_id'],
];
