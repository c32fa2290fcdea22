import { Knex } from 'knex';

import { exactCollation } from './exactCollation';

/**
 * On MySQL/MariaDB, the columns that hold text users send (metadata, callback URLs, failure reasons)
 * or text made of it (callback payloads, delivery errors) in utf8mb4. Tables made without a
 * character set take the database's default: latin1 on upstream MariaDB before 11.6 (Debian's
 * packages and MySQL 8 default to utf8mb4). There text beyond Latin-1 (CJK, emoji) was refused by
 * the server (1366), answered `500`, and a completion whose callback payload held such a userKey
 * could never commit: its batch's last ack failed for good. Identifiers are utf8mb4 already
 * (0007_exact_identifier_collation, exactString); IDs, states and outcomes are ASCII.
 *
 * Only a column not in utf8mb4 yet is changed (its table rebuilt, once: writes to it wait meanwhile),
 * and a table whose default is not utf8mb4 gets it, for columns added later; on a server whose
 * default is utf8mb4 nothing is altered.
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

/** Whether `table`'s default character set (its default collation's, whose name begins with it) is utf8mb4. */
async function defaultsToUtf8mb4(knex: Knex, table: string): Promise<boolean> {
  const [rows] = (await knex.raw('SELECT TABLE_COLLATION AS collation FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?', [
    table,
  ])) as [Array<{ collation: string | null }>];
  return rows[0]?.collation?.startsWith('utf8mb4_') ?? false;
}

/** The character set of each of `table`'s columns that has one, by name. */
async function characterSetsOf(knex: Knex, table: string): Promise<Map<string, string>> {
  const [rows] = (await knex.raw(
    'SELECT COLUMN_NAME AS name, CHARACTER_SET_NAME AS charset FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND CHARACTER_SET_NAME IS NOT NULL',
    [table],
  )) as [Array<{ name: string; charset: string }>];
  return new Map(rows.map((row) => [row.name, row.charset]));
}

export async function up(knex: Knex): Promise<void> {
  const collation = await exactCollation(knex);
  if (!collation) return;
  // The collation named, not the server's for utf8mb4, which differs by release (MariaDB 11.5 made it
  // uca1400_ai_ci): the exact one, as "Strings are exact" has it, for these columns and later ones.
  const utf8mb4 = `CHARACTER SET utf8mb4 COLLATE ${collation}`;
  for (const table of TABLES) {
    const charsets = await characterSetsOf(knex, table);
    const changes = (COLUMNS[table] ?? [])
      .filter(({ column }) => charsets.get(column) !== 'utf8mb4')
      .map(({ column, type }) => knex.raw(`MODIFY ?? ${type.replace(/^(\w+(\(\d+\))?)/, `$1 ${utf8mb4}`)}`, [column]).toQuery());
    if (!(await defaultsToUtf8mb4(knex, table))) changes.unshift(`DEFAULT ${utf8mb4}`);
    // Nothing to change, no ALTER: even one that changes only the default waits for the table's lock.
    if (changes.length > 0) await knex.raw(`ALTER TABLE ?? ${changes.join(', ')}`, [table]);
  }
}

/** Nothing: text beyond Latin-1 written since could not go back. */
export async function down(): Promise<void> {}
