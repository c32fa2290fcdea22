import { Knex } from 'knex';

/**
 * Identifier columns (tenants, user keys, idempotency keys) compare byte for byte on every backend
 * (API.md, "Strings are exact"). MySQL/MariaDB's default collations ignore case, accents and
 * trailing spaces; these columns take a binary collation without padding instead
 * (`utf8mb4_nopad_bin` on MariaDB, `utf8mb4_0900_bin` on MySQL 8; plain `utf8mb4_bin` still ignores
 * trailing spaces). SQLite and PostgreSQL compare bytes already. Not a migration: a helper of them.
 */
export const isMysql = (knex: Knex) => ['mysql', 'mysql2'].includes(knex.client.config.client as string);

/** The exact collation this MySQL/MariaDB server has; null on other databases. */
export async function exactCollation(knex: Knex): Promise<string | null> {
  if (!isMysql(knex)) return null;
  const [rows] = (await knex.raw("SHOW COLLATION WHERE Collation IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin')")) as [Array<{ Collation: string }>];
  const names = rows.map((r) => r.Collation);
  const found = ['utf8mb4_nopad_bin', 'utf8mb4_0900_bin'].find((name) => names.includes(name));
  if (!found) throw new Error('this server has no binary NO PAD collation (MariaDB ≥ 10.2 or MySQL ≥ 8.0 is needed)');
  return found;
}

/** A string column that compares exactly: the exact collation where the database needs one. */
export function exactString(t: Knex.CreateTableBuilder, name: string, length: number, collation: string | null): Knex.ColumnBuilder {
  const column = t.string(name, length);
  return collation ? column.collate(collation) : column;
}
