import { Knex } from 'knex';
import { Db, dialectOf, Queryable } from './db';

/**
 * Statements sent straight through the mysql2 driver on a connection of knex's pool, for the hot
 * paths where knex's per-query and per-transaction objects cost more CPU than the statement itself
 * (docs/design.md). knex still builds every statement and its bound values.
 */

/** The part of a mysql2 connection this module uses. */
export interface MysqlConnection {
  query(sql: string, values: unknown[], callback: (error: Error | null, results: unknown) => void): void;
  destroy(): void;
}

/**
 * Statements as one multi-statement query, values bound by the driver (never spliced into the text),
 * resolving with each statement's result in order. The server stops at the first failing statement,
 * so a COMMIT after a failed write never runs.
 */
export function send(connection: MysqlConnection, statements: Array<Knex.QueryBuilder | string>): Promise<unknown[]> {
  const sql: string[] = [];
  const values: unknown[] = [];
  for (const statement of statements) {
    if (typeof statement === 'string') {
      sql.push(statement);
      continue;
    }
    const native = statement.toSQL().toNative();
    sql.push(native.sql);
    values.push(...native.bindings);
  }
  return new Promise((resolve, reject) => {
    connection.query(sql.join(';\n'), values, (error, results) => {
      if (error) return reject(error);
      // mysql2 answers a single statement with its result, several with a list of results.
      resolve(statements.length === 1 ? [results] : (results as unknown[]));
    });
  });
}

/** Runs `use` on a connection of knex's pool and gives the connection back, whatever happens. */
export async function withConnection<T>(db: Db, use: (connection: MysqlConnection) => Promise<T>): Promise<T> {
  const connection = (await db.client.acquireConnection()) as MysqlConnection;
  try {
    return await use(connection);
  } finally {
    await db.client.releaseConnection(connection);
  }
}

/**
 * The rows of one SELECT. Outside a transaction on MySQL it goes straight through the driver; in a
 * transaction, or on SQLite, knex runs it.
 */
export async function selectRows<Row>(q: Queryable, query: Knex.QueryBuilder): Promise<Row[]> {
  if (dialectOf(q) !== 'mysql' || q.isTransaction) return (await query) as Row[];
  const [rows] = await withConnection(q, (connection) => send(connection, [query]));
  return rows as Row[];
}
