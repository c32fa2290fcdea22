import { Knex } from 'knex';

import { Db } from './db';
import { withPooledConnection } from './pooledConnection';

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

type Statement = Knex.QueryBuilder | string;

interface NativeStatement {
  sql: string;
  values: unknown[];
  /** Upper bound of the statement's bytes once the driver has escaped its values into the text. */
  bytes: number;
}

/** What one bound value can take as escaped SQL text (a Buffer becomes X'…', a string doubles at worst). */
function escapedBytes(value: unknown): number {
  if (Buffer.isBuffer(value)) return value.length * 2 + 3;
  if (typeof value === 'string') return Buffer.byteLength(value) * 2 + 2;
  return 24;
}

function nativeOf(statement: Statement): NativeStatement {
  if (typeof statement === 'string') return { sql: statement, values: [], bytes: statement.length };
  const native = statement.toSQL().toNative();
  const values = native.bindings as unknown[];
  return { sql: native.sql, values, bytes: values.reduce<number>((n, v) => n + escapedBytes(v), native.sql.length) };
}

/**
 * Statements as one multi-statement query, values bound by the driver (never spliced into the text
 * by this code), resolving with each statement's result in order. The server stops at the first
 * failing statement, so a COMMIT after a failed write never runs.
 */
export function send(connection: MysqlConnection, statements: Statement[]): Promise<unknown[]> {
  return sendNative(connection, statements.map(nativeOf));
}

function sendNative(connection: MysqlConnection, statements: NativeStatement[]): Promise<unknown[]> {
  return new Promise((resolve, reject) => {
    connection.query(
      statements.map((s) => s.sql).join(';\n'),
      statements.flatMap((s) => s.values),
      (error, results) => {
        if (error) return reject(error);
        // mysql2 answers a single statement with its result, several with a list of results.
        resolve(statements.length === 1 ? [results] : (results as unknown[]));
      },
    );
  });
}

/**
 * Like `send`, in as many round trips as it takes to keep each query under `budgetBytes` (half the
 * server's max_allowed_packet): one ack of 10,000 groups writes ~20 MB of escaped bitfields, more
 * than a default server takes in one packet. All of it runs on one connection, inside the
 * transaction the statements open and close, so splitting changes nothing but the packet size.
 */
export async function sendWithin(connection: MysqlConnection, statements: Statement[], budgetBytes: number): Promise<unknown[]> {
  const results: unknown[] = [];
  let round: NativeStatement[] = [];
  let bytes = 0;
  for (const statement of statements.map(nativeOf)) {
    if (round.length > 0 && bytes + statement.bytes > budgetBytes) {
      results.push(...(await sendNative(connection, round)));
      [round, bytes] = [[], 0];
    }
    round.push(statement);
    bytes += statement.bytes + 2;
  }
  if (round.length > 0) results.push(...(await sendNative(connection, round)));
  return results;
}

const packetBudgets = new WeakMap<Db, number>();

/** Half the server's max_allowed_packet, read once per pool. */
export async function packetBudget(db: Db, connection: MysqlConnection): Promise<number> {
  let budget = packetBudgets.get(db);
  if (budget === undefined) {
    const [rows] = (await send(connection, ['SELECT @@max_allowed_packet AS packet'])) as [Array<{ packet: number | string }>];
    budget = Math.floor(Number(rows[0]?.packet ?? 4 * 1024 * 1024) / 2);
    packetBudgets.set(db, budget);
  }
  return budget;
}

/** Runs `use` on a connection of knex's pool and gives the connection back, whatever happens. */
export const withConnection = <T>(db: Db, use: (connection: MysqlConnection) => Promise<T>): Promise<T> => withPooledConnection(db, use);
