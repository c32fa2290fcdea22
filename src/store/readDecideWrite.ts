import { Knex } from 'knex';

import { toError } from '../domain/errors';
import { Db, multiStatementPool, onGalera, Queryable } from './db';
import { profileOf } from './dialect';
import { MysqlConnection, packetBudget, send, sendWithin, withConnection } from './mysqlDriver';
import { asUnavailable, inTransaction, TransactionOptions, withRetries } from './transaction';

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
export async function readDecideWrite<T>(db: Db, options: TransactionOptions, work: ReadDecideWrite<T>): Promise<T> {
  if (profileOf(db).hotPath === 'mysql2-multi-statement') {
    // A database that does not answer the question is unavailable (503), as it would be for the transaction.
    const galera = await onGalera(db).catch((error: unknown) => Promise.reject(asUnavailable(toError(error))));
    if (!galera) return withRetries(options, () => onOneConnection(db, work));
  }
  // On Galera, statements one at a time: a conflict between nodes that aborts the transaction
  // between two multi-statement queries let the next one's writes commit anyway (a lost update,
  // ~1 in 300 contended transactions in our runs; docs/scaling.md). Sent alone, the first statement
  // after the abort fails with the deadlock error and nothing of this attempt commits.
  return inTransaction(db, options, async (trx) => {
    const { writes, answer } = work.decide(trx, await runEach(work.reads(trx)));
    await runEach(writes);
    return answer;
  });
}

async function runEach(statements: Knex.QueryBuilder[]): Promise<unknown[]> {
  const results: unknown[] = [];
  for (const statement of statements) results.push(await statement);
  return results;
}

function onOneConnection<T>(db: Db, work: ReadDecideWrite<T>): Promise<T> {
  const pool = multiStatementPool(db);
  return withConnection(pool, async (connection) => {
    try {
      const budget = await packetBudget(pool, connection);
      const [, ...results] = await sendWithin(connection, ['BEGIN', ...work.reads(db)], budget);
      const { writes, answer } = work.decide(db, results);
      await sendWithin(connection, [...writes, 'COMMIT'], budget);
      return answer;
    } catch (caught) {
      await rollBack(connection);
      throw toError(caught);
    }
  });
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
