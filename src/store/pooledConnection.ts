import { toError } from '../domain/errors';
import { Db } from './db';

/**
 * A driver's own connection taken from knex's pool, for the hot paths that skip knex's query
 * objects (mysqlDriver.ts, pgDriver.ts).
 */

/** Runs `use` on a connection of knex's pool and gives the connection back, whatever happens. */
export async function withPooledConnection<C, T>(db: Db, use: (connection: C) => Promise<T>): Promise<T> {
  const connection = (await db.client.acquireConnection()) as C;
  try {
    return await use(connection);
  } finally {
    await db.client.releaseConnection(connection);
  }
}

/** How a driver ends a failed transaction: ROLLBACK, or closing the connection when even that fails. */
export interface TransactionEnd {
  rollBack(): Promise<unknown>;
  close(): Promise<unknown> | void;
}

/**
 * Runs a transaction's round trips and, when they fail, ends the transaction before the connection
 * goes back to the pool. A connection that cannot even roll back is closed instead (knex's pool
 * drops closed ones): the pool must never hand out one with a transaction still open, and the
 * server rolls back the transaction of a closed connection.
 */
export async function endingFailed<T>(end: TransactionEnd, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (caught) {
    try {
      await end.rollBack();
    } catch {
      await end.close();
    }
    throw toError(caught);
  }
}
