import { Knex } from 'knex';

import { DISTRIBUTED_TABLES, onCitus } from './citus';

/**
 * On Citus, shards every batch-scoped table by batch id (docs/scaling.md); on any other database it
 * does nothing. Citus needs every unique key to hold the distribution column: the outbox's key
 * becomes (batch_id, id), and batches.parent_item loses its unique index (child_links, migration
 * 0013, keeps one child per item).
 */
export async function up(knex: Knex): Promise<void> {
  if (!(await onCitus(knex))) return;
  await knex.raw('ALTER TABLE batches DROP CONSTRAINT batches_parent_item');
  await knex.raw('ALTER TABLE outbox DROP CONSTRAINT outbox_pkey');
  await knex.raw('ALTER TABLE outbox ADD PRIMARY KEY (batch_id, id)');
  for (const [table, column] of DISTRIBUTED_TABLES) {
    await knex.raw("SELECT create_distributed_table(?, ?, colocate_with => CASE WHEN ? = 'batches' THEN 'default' ELSE 'batches' END)", [table, column, table]);
  }
}

export async function down(knex: Knex): Promise<void> {
  if (!(await onCitus(knex))) return;
  for (const [table] of [...DISTRIBUTED_TABLES].reverse()) await knex.raw('SELECT undistribute_table(?)', [table]);
  await knex.raw('ALTER TABLE outbox DROP CONSTRAINT outbox_pkey');
  await knex.raw('ALTER TABLE outbox ADD PRIMARY KEY (id)');
  await knex.raw('ALTER TABLE batches ADD CONSTRAINT batches_parent_item UNIQUE (parent_item)');
}
