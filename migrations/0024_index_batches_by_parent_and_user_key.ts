import { Knex } from 'knex';

import { isMysql } from './exactCollation';

/**
 * Lets a list with a parent and a userKey (`?parent=p&userKey=k`, with a state or not) read the
 * parent's children of that key alone, newest first, as one index range. Before, no index held both:
 * the store walked all of the parent's children, or all of the tenant's batches of that key, to find
 * the few with both, holding a pooled connection for seconds per request on a parent with a million
 * children (found in a review). The state, where given, is checked on those few rows.
 */
export async function up(knex: Knex): Promise<void> {
  // One statement on MySQL/MariaDB, where each DDL statement commits alone (as 0020).
  if (isMysql(knex)) {
    return void (await knex.raw('ALTER TABLE batches ADD INDEX batches_parent_user_key (parent_batch_id, user_key, id)'));
  }
  await knex.schema.alterTable('batches', (t) => {
    t.index(['parent_batch_id', 'user_key', 'id'], 'batches_parent_user_key');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batches', (t) => {
    t.dropIndex(['parent_batch_id', 'user_key', 'id'], 'batches_parent_user_key');
  });
}
