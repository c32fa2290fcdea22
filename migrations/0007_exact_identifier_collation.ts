import { Knex } from 'knex';

import { exactCollation, isMysql } from './exactCollation';

/**
 * Tenant, userKey and Idempotency-Key compare byte for byte (API.md, "Strings are exact"): with
 * MySQL/MariaDB's default collations `Acme` read `acme`'s batches and an add keyed `ABC` was
 * answered with `abc`'s groups. See exactCollation.ts.
 */
const COLUMNS = [
  { table: 'batches', column: 'tenant', type: "VARCHAR(64) NOT NULL DEFAULT ''" },
  { table: 'batches', column: 'user_key', type: 'VARCHAR(255) NULL' },
  { table: 'add_requests', column: 'idempotency_key', type: 'VARCHAR(255) NOT NULL' },
];

export async function up(knex: Knex): Promise<void> {
  const collation = await exactCollation(knex);
  if (!collation) return;
  for (const { table, column, type } of COLUMNS) {
    await knex.raw(`ALTER TABLE ?? MODIFY ?? ${type.replace(/^VARCHAR\(\d+\)/, (t) => `${t} CHARACTER SET utf8mb4 COLLATE ${collation}`)}`, [table, column]);
  }
}

export async function down(knex: Knex): Promise<void> {
  if (!isMysql(knex)) return;
  for (const { table, column, type } of COLUMNS) await knex.raw(`ALTER TABLE ?? MODIFY ?? ${type}`, [table, column]);
}
