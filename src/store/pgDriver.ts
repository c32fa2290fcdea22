import { Knex } from 'knex';

import { toError } from '../domain/errors';
import { Db, perTransactionSettings } from './db';
import { endingFailed, TransactionEnd, withPooledConnection } from './pooledConnection';
import { commitFailed, TransactionOptions, withRetries } from './transaction';

/**
 * Statements sent straight through node-postgres on a connection of knex's pool, for the hot paths
 * (docs/design.md, "Two round trips per ack transaction"). The pool's clients run in pipeline mode
 * (`pipeline: true`, db.ts): every statement queued before the first answer goes out at once, each
 * with its own Sync, so `BEGIN` and the locking reads cost one round trip and the writes and
 * `COMMIT` another. Values are always bound ($1, $2 …), never spliced into the text.
 */

/** One statement and its bound values, as node-postgres takes them. */
export interface PgStatement {
  text: string;
  values: unknown[];
  /** A prepared statement's name: the server parses it once per connection, not on every call. */
  name?: string;
}

interface PgResult {
  rows: unknown[];
  command: string;
}

/** The part of a node-postgres client this module uses. */
export interface PgClient {
  query(statement: PgStatement): Promise<PgResult>;
  end(): Promise<void>;
}

/** A statement knex built (its values still bound), or a fixed text without values. */
export function pgStatement(statement: Knex.QueryBuilder | string): PgStatement {
  if (typeof statement === 'string') return { text: statement, values: [] };
  const native = statement.toSQL().toNative();
  return { text: native.sql, values: native.bindings as unknown[] };
}

/** Texts named so far, and the most this process names (a bound, should a caller vary its text). */
const statementNames = new Map<string, string>();
const MAX_NAMED = 200;

/**
 * The statement as a prepared one, for texts that depend only on a statement's shape (the ack's few
 * dozen): each connection parses each text once and the server, once its plan cache settles, skips
 * planning too. Past MAX_NAMED texts, statements go unnamed. Only for statements whose result
 * columns a later migration cannot change: a prepared `SELECT *` fails with "cached plan must not
 * change result type" once a column is added, so the plain reads (`SELECT *`) stay unnamed.
 */
export function prepared(text: string, values: unknown[]): PgStatement {
  let name = statementNames.get(text);
  if (name === undefined && statementNames.size < MAX_NAMED) statementNames.set(text, (name = `rollcall_${statementNames.size}`));
  return name === undefined ? { text, values } : { name, text, values };
}

/**
 * Sends every statement before waiting for any answer and resolves with their results in order.
 * When one fails, the server still answers those behind it (inside a transaction they fail too, and
 * a `COMMIT` there rolls back): this waits for all, then rejects with the first failure, the cause,
 * as `asFailureOf` gives it for that statement's place.
 */
export async function pipelined(client: PgClient, statements: PgStatement[], asFailureOf = (error: Error, _index: number) => error): Promise<PgResult[]> {
  const settled = await Promise.allSettled(statements.map((statement) => client.query(statement)));
  const failedAt = settled.findIndex((s) => s.status === 'rejected');
  if (failedAt >= 0) throw asFailureOf(toError((settled[failedAt] as PromiseRejectedResult).reason), failedAt);
  return settled.map((s) => (s as PromiseFulfilledResult<PgResult>).value);
}

/** Runs `use` on a client of knex's pool and gives it back, whatever happens. */
export const withPgClient = <T>(db: Db, use: (client: PgClient) => Promise<T>): Promise<T> => withPooledConnection(db, use);

/** The rows of one SELECT outside a transaction, straight through the driver. */
export async function pgSelectRows<Row>(db: Db, query: Knex.QueryBuilder): Promise<Row[]> {
  const [result] = await withPgClient(db, (client) => pipelined(client, [pgStatement(query)]));
  return (result?.rows ?? []) as Row[];
}

/** A read-decide-write transaction as PostgreSQL statements (readDecideWrite.ts). */
export interface PgReadDecideWrite<T> {
  reads: PgStatement[];
  /** Rows of each read, in order; no I/O. */
  decide(rows: unknown[][]): { writes: PgStatement[]; answer: T };
}

const BEGIN = pgStatement('BEGIN');
const BEGIN_READ_COMMITTED = pgStatement('BEGIN ISOLATION LEVEL READ COMMITTED');
const COMMIT = pgStatement('COMMIT');

/**
 * How a transaction of `db` opens, and its statements as they go: behind a pooler in transaction
 * mode it sets its own isolation and lock wait (perTransactionSettings, in the same round trip),
 * and its statements go unnamed, since a statement prepared on one server session is unknown to
 * the next one the pooler lends (PgBouncer before 1.21 passes them through as they are).
 */
function transactionShape(db: Db): { opening: PgStatement[]; statement: (statement: PgStatement) => PgStatement } {
  const settings = perTransactionSettings(db);
  if (settings === null) return { opening: [BEGIN], statement: (statement) => statement };
  return { opening: [BEGIN_READ_COMMITTED, pgStatement(settings)], statement: ({ text, values }) => ({ text, values }) };
}

/**
 * Runs a read-decide-write transaction in two round trips on one pooled client, again from the start
 * (`work` builds it anew) after a deadlock or serialization failure, like every transaction
 * (withRetries: a lock timeout or a lost connection is 503, not retried).
 */
export function pgReadDecideWrite<T>(db: Db, options: TransactionOptions, work: () => PgReadDecideWrite<T>): Promise<T> {
  const { opening, statement } = transactionShape(db);
  return withRetries(options, () =>
    withPgClient(db, (client) =>
      endingFailed(ending(client), async () => {
        const { reads, decide } = work();
        const results = (await pipelined(client, [...opening, ...reads.map(statement)])).slice(opening.length);
        const { writes, answer } = decide(results.map((result) => result.rows));
        const ofCommit = (error: Error, index: number) => (index === writes.length ? commitFailed(error) : error);
        const commit = (await pipelined(client, [...writes.map(statement), COMMIT], ofCommit)).at(-1);
        // A COMMIT of a transaction the server already aborted answers ROLLBACK, not an error.
        if (commit?.command !== 'COMMIT') throw commitFailed(new Error(`the transaction ended with ${commit?.command} instead of COMMIT`));
        return answer;
      }),
    ),
  );
}

/** How long a client that cannot roll back is given to close before it goes back to the pool. */
const END_WAIT_MS = 1000;

const ending = (client: PgClient): TransactionEnd => ({
  rollBack: () => client.query(pgStatement('ROLLBACK')),
  // Bounded: a client whose socket is gone may never say it has ended. Once it has, knex's pool drops it.
  close: () => Promise.race([client.end().catch(() => undefined), new Promise((resolve) => setTimeout(resolve, END_WAIT_MS))]),
});
