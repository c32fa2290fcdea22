import { Knex } from 'knex';

import { isMysql } from './exactCollation';

/**
 * On MySQL/MariaDB, the columns that hold text users send (metadata, callback URLs, failure reasons)
 * or text made of it (callback payloads, delivery errors) in utf8mb4. Tables made without a
 * character set take the database's default: latin1 on upstream MariaDB before 11.6 (Debian's
 * packages and MySQL 8 default to utf8mb4). There text beyond Latin-1 (CJK, emoji) was refused by
 * the server (1366), answered `500`, and a completion whose callback payload held such a userKey
 * could never commit: its batch's last ack failed for good. Identifiers are utf8mb4 already
 * (0007_exact_identifier_collation, exactString); IDs, states and outcomes are ASCII.
 *
 * Only a column not in utf8mb4 yet is changed (its table rebuilt, once), so on a server whose
 * default is utf8mb4 nothing is; each table's default becomes utf8mb4 too, for columns added later.
 */
const COLUMNS: Record<string, Array<{ column: string; type: string }>> = {
  batches: [
    { column: 'metadata', type: 'TEXT NULL' },
    { column: 'callback_url', type: 'VARCHAR(2048) NULL' },
  ],
  outbox: [
    { column: 'url', type: 'VARCHAR(2048) NOT NULL' },
    { column: 'payload', type: 'MEDIUMTEXT NOT NULL' },
    { column: 'last_error', type: 'VARCHAR(1024) NULL' },
    { column: 'host', type: "VARCHAR(255) NOT NULL DEFAULT ''" },
  ],
  failure_reasons: [{ column: 'error', type: 'VARCHAR(1000) NOT NULL' }],
  child_outcomes: [{ column: 'error', type: 'VARCHAR(1000) NULL' }],
};

const TABLES = ['batches', 'item_groups', 'add_requests', 'outbox', 'failure_reasons', 'child_outcomes', 'child_links'];

/** The character set of each of `table`'s columns that has one, by name. */
async function characterSetsOf(knex: Knex, table: string): Promise<Map<string, string>> {
  const [rows] = (await knex.raw(
    'SELECT COLUMN_NAME AS name, CHARACTER_SET_NAME AS charset FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND CHARACTER_SET_NAME IS NOT NULL',
    [table],
  )) as [Array<{ name: string; charset: string }>];
  return new Map(rows.map((row) => [row.name, row.charset]));
}

export async function up(knex: Knex): Promise<void> {
  if (!isMysql(knex)) return;
  for (const table of TABLES) {
    const charsets = await characterSetsOf(knex, table);
    const changes = (COLUMNS[table] ?? [])
      .filter(({ column }) => charsets.get(column) !== 'utf8mb4')
      .map(({ column, type }) => knex.raw(`MODIFY ?? ${type.replace(/^(\w+(\(\d+\))?)/, '$1 CHARACTER SET utf8mb4')}`, [column]).toQuery());
    await knex.raw(`ALTER TABLE ?? ${['DEFAULT CHARACTER SET utf8mb4', ...changes].join(', ')}`, [table]);
  }
}

/** Nothing: text beyond Latin-1 written since could not go back. */
export async function down(): Promise<void> {}
