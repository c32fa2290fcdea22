import { Knex } from 'knex';

/**
 * Tenant, userKey and Idempotency-Key compare byte for byte (API.md, "Strings are exact").
 * MySQL/MariaDB's default collations ignore case, accents and trailing spaces, so `Acme` read
 * `acme`'s batches and an add keyed `ABC` was answered with `abc`'s groups. The columns get a
 * binary collation without padding (`utf8mb4_nopad_bin` on MariaDB, `utf8mb4_0900_bin` on MySQL 8;
 * plain `utf8mb4_bin` still ignores trailing spaces). SQLite and PostgreSQL compare bytes already.
 */
const COLUMNS = [
  { table: 'batches', column: 'tenant', type: "VARCHAR(64) NOT NULL DEFAULT ''" },
  { table: 'batches', column: 'user_key', type: 'VARCHAR(255) NULL' },
  { table: 'add_requests', column: 'idempotency_key', type: 'VARCHAR(255) NOT NULL' },
];

const isMysql = (knex: Knex) => ['mysql', 'mysql2'].includes(knex.client.config.client as string);

async function exactCollation(knex: Knex): Promise<string> {
  const [rows] = (await knex.raw("SHOW COLLATION WHERE Collation IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin')")) as [Array<{ Collation: string }>];
  const names = rows.map((r) => r.Collation);
  const found = ['utf8mb4_nopad_bin', 'utf8mb4_0900_bin'].find((name) => names.includes(name));
  if (!found) throw new Error('this server has no binary NO PAD collation (MariaDB ≥ 10.2 or MySQL ≥ 8.0 is needed)');
  return found;
}

export async function up(knex: Knex): Promise<void> {
  if (!isMysql(knex)) return;
  const collation = await exactCollation(knex);
  for (const { table, column, type } of COLUMNS) {
    await knex.raw(`ALTER TABLE ?? MODIFY ?? ${type.replace(/^VARCHAR\(\d+\)/, (t) => `${t} CHARACTER SET utf8mb4 COLLATE ${collation}`)}`, [table, column]);
  }
}

export async function down(knex: Knex): Promise<void> {
  if (!isMysql(knex)) return;
  for (const { table, column, type } of COLUMNS) await knex.raw(`ALTER TABLE ?? MODIFY ?? ${type}`, [table, column]);
}
