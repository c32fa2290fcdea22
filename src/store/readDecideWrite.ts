import { Knex } from 'knex';

import { toError } from '../domain/errors';
import { Db, multiStatementPool, onCitus, onGalera, Queryable } from './db';
import { profileOf } from './dialect';
import { MysqlConnection, packetBudget, send, sendWithin, withConnection } from './mysqlDriver';
import { PgReadDecideWrite, pgReadDecideWrite, pgSelectRows, pgStatement } from './pgDriver';
import { endingFailed, TransactionEnd } from './pooledConnection';
import { asUnavailable, inTransaction, TransactionOptions, withRetries } from './transaction';

/**
 * A transaction in three steps: locking reads, a decision from what they returned (no I/O), and
 * the writes that decision made. Both functions only build statements with `q`; readDecideWrite
 * runs them, and a retry calls both again from the start.
 */
export interface ReadDecideWrite<T> {
  reads(q: Queryable): Knex.QueryBuilder[];
  decide(q: Queryable, results: unknown[]): { writes: Knex.QueryBuilder[]; answer: T };
  /**
   * The same transaction as one reading and one writing statement over bound arrays, for
   * PostgreSQL (the ack: pgAckStatements.ts). Not on Citus, where a locking read that spans
   * batches is refused: there `reads`/`decide` run, one batch per locking statement.
   */
  asPgStatements?(): PgReadDecideWrite<T>;
}

/**
 * Runs a read-decide-write transaction, again from the start after a deadlock or lock-wait timeout.
 *
 * On MySQL it takes two round trips on one pooled connection: `BEGIN` with the reads as one
 * multi-statement query, then the writes with `COMMIT` as another. knex's own transactions cost two
 * more round trips (BEGIN and COMMIT alone), and the knex objects they build cost more CPU than the
 * statements. With knex's machinery gone, an ack call used ~25 % less CPU
 * (docs/benchmarks.md). On PostgreSQL it is the same two round trips through node-postgres's
 * pipeline mode (pgDriver.ts). On SQLite, which runs in-process, it is a knex transaction that runs
 * the statements one by one.
 */
export async function readDecideWrite<T>(db: Db, options: TransactionOptions, work: ReadDecideWrite<T>): Promise<T> {
  const { hotPath } = profileOf(db);
  if (hotPath === 'pg-pipeline') {
    const statements = work.asPgStatements && !(await unlessAway(onCitus(db))) ? work.asPgStatements : () => pgWork(db, work);
    return pgReadDecideWrite(db, options, statements);
  }
  if (hotPath === 'mysql2-multi-statement' && !(await unlessAway(onGalera(db)))) return withRetries(options, () => onOneConnection(db, work));
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

/** A database that does not answer the question is unavailable (503), as it would be for the transaction. */
const unlessAway = (question: Promise<boolean>) => question.catch((error: unknown) => Promise.reject(asUnavailable(toError(error))));

/** The knex-built statements of `work` as node-postgres takes them. */
function pgWork<T>(db: Db, work: ReadDecideWrite<T>): PgReadDecideWrite<T> {
  return {
    reads: work.reads(db).map(pgStatement),
    decide(rows: unknown[][]) {
      const { writes, answer } = work.decide(db, rows);
      return { writes: writes.map(pgStatement), answer };
    },
  };
}

async function runEach(statements: Knex.QueryBuilder[]): Promise<unknown[]> {
  const results: unknown[] = [];
  for (const statement of statements) results.push(await statement);
  return results;
}

function onOneConnection<T>(db: Db, work: ReadDecideWrite<T>): Promise<T> {
  const pool = multiStatementPool(db);
  return withConnection(pool, (connection) =>
    endingFailed(ending(connection), async () => {
      const budget = await packetBudget(pool, connection);
      const [, ...results] = await sendWithin(connection, ['BEGIN', ...work.reads(db)], budget);
      const { writes, answer } = work.decide(db, results);
      await sendWithin(connection, [...writes, 'COMMIT'], budget);
      return answer;
    }),
  );
}

const ending = (connection: MysqlConnection): TransactionEnd => ({
  rollBack: () => send(connection, ['ROLLBACK']),
  close: () => connection.destroy(),
});

/**
 * The rows of one SELECT. Outside a transaction on MySQL and PostgreSQL it goes straight through the
 * driver (knex only builds it); in a transaction, or on SQLite, knex runs it.
 */
export async function selectRows<Row>(q: Queryable, query: Knex.QueryBuilder): Promise<Row[]> {
  const { hotPath } = profileOf(q);
  if (q.isTransaction || hotPath === 'knex') return (await query) as Row[];
  if (hotPath === 'pg-pipeline') return pgSelectRows<Row>(q as Db, query);
  const [rows] = await withConnection(q as Db, (connection) => send(connection, [query]));
  return rows as Row[];
}
