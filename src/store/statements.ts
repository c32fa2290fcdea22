import { Knex } from 'knex';
import { dialectOf } from './db';

/**
 * Runs statements of one transaction in order and returns each one's result (rows for a SELECT).
 * On MySQL they travel as one multi-statement query: under load each round trip to the server costs
 * the service more CPU than the statement itself, and an ack transaction would otherwise make one
 * per statement. SQLite runs in-process, so there they simply run one after the other.
 * Statements come from knex's builders, so their values are bound, never spliced in.
 */
export async function runInOrder(trx: Knex.Transaction, statements: Knex.QueryBuilder[]): Promise<unknown[]> {
  if (dialectOf(trx) !== 'mysql') {
    const results: unknown[] = [];
    for (const statement of statements) results.push(await statement);
    return results;
  }
  if (statements.length === 0) return [];
  const compiled = statements.map((statement) => statement.toSQL().toNative());
  const sql = compiled.map((c) => c.sql).join(';\n');
  const [results] = (await trx.raw(sql, compiled.flatMap((c) => c.bindings as Knex.RawBinding[]))) as [unknown];
  // mysql2 answers a single statement with its result, several with a list of results.
  return statements.length === 1 ? [results] : (results as unknown[]);
}
