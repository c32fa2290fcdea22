import { Knex } from 'knex';

import { isMysql } from './exactCollation';

/**
 * On MySQL/MariaDB and PostgreSQL, lets the dispatcher's read of due events leave out tenants and
 * hosts whose share is in use by index ranges (store/outbox.ts `outside`) instead of walking their
 * whole backlog row by row: with 50,000 due events of one such tenant, a claim's read took ~160 ms
 * on MariaDB and ~36 ms on PostgreSQL, under 2 ms with these (docs/benchmarks.md). Not on SQLite: its
 * planner took such an index for the plain read and sorted every due event (8 ms became 440 ms).
 */
const sqlite = (knex: Knex) => ['sqlite3', 'better-sqlite3'].includes(knex.client.config.client as string);

export async function up(knex: Knex): Promise<void> {
  if (sqlite(knex)) return;
  // One statement on MySQL/MariaDB, where each DDL statement commits alone: had the second index's
  // ALTER timed out on a busy outbox after the first's committed, the migration, run again, would
  // fail for good on the first index's name.
  if (isMysql(knex))
    return void (await knex.raw(
      'ALTER TABLE outbox ADD INDEX outbox_due_by_tenant (status, tenant, next_attempt_at), ADD INDEX outbox_due_by_host (status, host, next_attempt_at)',
    ));
  await knex.schema.alterTable('outbox', (t) => {
    t.index(['status', 'tenant', 'next_attempt_at'], 'outbox_due_by_tenant');
    t.index(['status', 'host', 'next_attempt_at'], 'outbox_due_by_host');
  });
}

export async function down(knex: Knex): Promise<void> {
  if (sqlite(knex)) return;
  await knex.schema.alterTable('outbox', (t) => {
    t.dropIndex(['status', 'tenant', 'next_attempt_at'], 'outbox_due_by_tenant');
    t.dropIndex(['status', 'host', 'next_attempt_at'], 'outbox_due_by_host');
  });
}
