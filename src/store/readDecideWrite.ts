import { Knex } from 'knex';
import { toError } from '../domain/errors';
import { Db, dialectOf, Queryable } from './db';
import { inTransaction, TransactionOptions, withRetries } from './transaction';

/**
 * A transaction in three steps: locking reads, a decision from what they returned (no I/O), and
 * the writes that decision made. Both functions only build statements with `q`; readDecideWrite
 * runs them, and a retry calls both again from the start.
 */
export interface ReadDecideWrite<T> {
  reads(q: Queryable): Knex.QueryBuilder[];
  decide(q: Queryable, results: unknown[]): { writes: Knex.QueryBuilder[]; answer: T };
}

/**
 * Runs a read-decide-write transaction, again from the start after a deadlock or lock-wait timeout.
 *
 * On MySQL it takes two round trips on one pooled connection: `BEGIN` with the reads as one
 * multi-statement query, then the writes with `COMMIT` as another. knex's own transactions cost two
 * more round trips (BEGIN and COMMIT alone), and the knex objects they build cost more CPU than the
 * statements. With knex's machinery gone, an ack call used ~25 % less CPU
 * (docs/benchmarks.md). On SQLite, which runs in-process, it is a knex transaction that runs the
 * statements one by one.
 */
export function readDecideWrite<T>(db: Db, options: TransactionOptions, work: ReadDecideWrite<T>): Promise<T> {
  if (dialectOf(db) !== 'mysql') {
    return inTransaction(db, options, async (trx) => {
      const { writes, answer } = work.decide(trx, await runEach(work.reads(trx)));
      await runEach(writes);
      return answer;
    });
  }
  return withRetries(options, () => onOneConnection(db, work));
}

async function runEach(statements: Knex.QueryBuilder[]): Promise<unknown[]> {
  const results: unknown[] = [];
  for (const statement of statements) results.push(await statement);
  return results;
}

/** The part of a mysql2 connection this module uses. */
interface MysqlConnection {
  query(sql: string, values: unknown[], callback: (error: Error | null, results: unknown) => void): void;
  destroy(): void;
}

/**
 * Statements as one multi-statement query, values bound by the driver (never spliced into the text),
 * resolving with each statement's result in order. The server stops at the first failing statement,
 * so a COMMIT after a failed write never runs.
 */
function send(connection: MysqlConnection, statements: Array<Knex.QueryBuilder | string>): Promise<unknown[]> {
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

async function onOneConnection<T>(db: Db, work: ReadDecideWrite<T>): Promise<T> {
  const connection = (await db.client.acquireConnection()) as MysqlConnection;
  try {
    const [, ...results] = await send(connection, ['BEGIN', ...work.reads(db)]);
    const { writes, answer } = work.decide(db, results);
    await send(connection, [...writes, 'COMMIT']);
    return answer;
  } catch (caught) {
    await rollBack(connection);
    throw toError(caught);
  } finally {
    await db.client.releaseConnection(connection);
  }
}

/**
 * Ends a failed transaction before its connection goes back to the pool. A connection that cannot
 * even roll back is closed instead: the pool must never hand out one with a transaction still open,
 * and the server rolls back the transaction of a closed connection.
 */
async function rollBack(connection: MysqlConnection): Promise<void> {
  try {
    await send(connection, ['ROLLBACK']);
  } catch {
    connection.destroy(); // knex's pool checks connections and drops closed ones
  }
}
