import { groupKey } from '../domain/ackPlan';
import type { AckReads, AckRows, AckWrites } from './ackTransaction';
import { batchFromRow, BatchRow, batchUpdate } from './batches';
import { childOutcomeRow } from './childOutcomes';
import { reasonPlanRows, storedReasonsFrom } from './failureReasons';
import { groupFromRow, GroupRow, groupRow } from './groups';
import { eventRow } from './outbox';
import { PgReadDecideWrite, PgStatement, prepared } from './pgDriver';

/**
 * The ack transaction on PostgreSQL (hotPath `pg-pipeline`): its locking reads as one statement and
 * its writes as one statement, whatever the number of batches, groups and rows, every value bound
 * as one array per column (`unnest`). knex would build a statement per batch (and per 500 rows),
 * each parsed and planned by the server; here the statement text depends only on which kinds of
 * rows are written, so the server's work and the bound parameters stay a handful.
 */

/** Each bound column: its name and its PostgreSQL type (the array's element type). */
type Columns<Row> = ReadonlyArray<readonly [keyof Row & string, string]>;

/** Bound values in order, and the `$n` placeholders that name them. */
class Binder {
  readonly values: unknown[] = [];

  bind(value: unknown, type: string): string {
    this.values.push(value);
    return `$${this.values.length}::${type}`;
  }

  /** `unnest($1::text[], …) AS alias(col, …)`: the rows as one bound array per column. */
  unnest<Row>(alias: string, columns: Columns<Row>, rows: Row[]): string {
    const arrays = columns.map(([name, type]) =>
      this.bind(
        rows.map((row) => row[name] ?? null),
        `${type}[]`,
      ),
    );
    return `unnest(${arrays.join(', ')}) AS ${alias}(${names(columns)})`;
  }
}

const names = <Row>(columns: Columns<Row>) => columns.map(([name]) => name).join(', ');

/**
 * The locking reads, in the one lock order: the batch rows by id, then the named group rows by
 * (batch, id). Each is a materialized CTE whose rows are locked in its ORDER BY; the UNION ALL runs
 * the batch part to its end before the group part starts. A row another transaction changed after
 * this statement began is locked and returned in its newest committed version (READ COMMITTED).
 */
const LOCK_TARGETS = `WITH b AS MATERIALIZED (
  SELECT * FROM batches WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE
), g AS MATERIALIZED (
  SELECT t.batch_id, t.id, t.size, t.pending, t.succeeded_bits, t.failed_bits
  FROM unnest($2::text[], $3::text[]) AS k(batch_id, id)
  JOIN item_groups AS t ON t.batch_id = k.batch_id AND t.id = k.id
  ORDER BY t.batch_id, t.id FOR UPDATE OF t
)
SELECT row_to_json(b) AS batch, NULL::text AS batch_id, NULL::text AS id, NULL::integer AS size,
  NULL::integer AS pending, NULL::bytea AS succeeded_bits, NULL::bytea AS failed_bits FROM b
UNION ALL
SELECT NULL, batch_id, id, size, pending, succeeded_bits, failed_bits FROM g`;

/**
 * How many reasons some batches keep, and the newest one's time (reasonCountQuery): a statement of
 * its own, so its snapshot is taken after the batch rows were locked and it sees every reason
 * committed before (failureReasons.ts). In one statement with the locks it would see the snapshot
 * taken before it waited for them. A batch without reasons has no row.
 */
const REASON_COUNTS = 'SELECT batch_id, count(*) AS kept, max(failed_at) AS newest FROM failure_reasons WHERE batch_id = ANY($1::text[]) GROUP BY batch_id';

/** The stored reasons among the items named by failures with an error, as runs (namedReasonsQueries); read as REASON_COUNTS is. */
const NAMED_REASONS = `SELECT f.batch_id, f.group_id, f.item_index
  FROM unnest($1::text[], $2::text[], $3::integer[], $4::integer[]) AS r(batch_id, group_id, low, high)
  JOIN failure_reasons AS f ON f.batch_id = r.batch_id AND f.group_id = r.group_id AND f.item_index BETWEEN r.low AND r.high`;

type TargetRow = { batch: BatchRow | null } & GroupRow;

function readStatements(reads: AckReads): PgStatement[] {
  const batchIds = [...reads.groupIdsByBatch.keys()];
  const keys = batchIds.flatMap((batchId) => [...(reads.groupIdsByBatch.get(batchId) ?? [])].map((id) => [batchId, id] as const));
  const statements = [prepared(LOCK_TARGETS, [batchIds, keys.map(([batchId]) => batchId), keys.map(([, id]) => id)])];
  if (reads.reasonBatches.length > 0) {
    const runs = reads.reasonRuns;
    statements.push(
      prepared(REASON_COUNTS, [reads.reasonBatches]),
      prepared(NAMED_REASONS, [runs.map((run) => run.batchId), runs.map((run) => run.groupId), runs.map((run) => run.from), runs.map((run) => run.to)]),
    );
  }
  return statements;
}

function rowsRead(reads: AckReads, [targets = [], counts = [], named = []]: unknown[][]): AckRows {
  const rows = targets as TargetRow[];
  const countOf = new Map((counts as Array<{ batch_id: string }>).map((row) => [row.batch_id, [row]]));
  return {
    batches: new Map(rows.flatMap((row) => (row.batch ? [[row.batch.id, batchFromRow(row.batch)] as const] : []))),
    groups: new Map(rows.filter((row) => !row.batch).map((row) => [groupKey(row.batch_id, row.id), groupFromRow(row)])),
    storedReasons: storedReasonsFrom(
      reads.reasonBatches,
      reads.reasonBatches.map((id) => countOf.get(id) ?? []),
      [named],
    ),
  };
}

const GROUP_COLUMNS: Columns<GroupRow> = [
  ['batch_id', 'text'],
  ['id', 'text'],
  ['size', 'integer'],
  ['pending', 'integer'],
  ['succeeded_bits', 'bytea'],
  ['failed_bits', 'bytea'],
];

type BatchUpdate = ReturnType<typeof batchUpdate> & { id: string };
const BATCH_COLUMNS: Columns<BatchUpdate> = [
  ['id', 'text'],
  ['state', 'text'],
  ['total', 'bigint'],
  ['succeeded', 'bigint'],
  ['failed', 'bigint'],
  ['open_groups', 'integer'],
  ['updated_at', 'bigint'],
  ['sealed_at', 'bigint'],
  ['completed_at', 'bigint'],
  ['cancelled_at', 'bigint'],
  ['first_failure_at', 'bigint'],
  ['failures_dropped', 'bigint'],
];

type ReasonRows = ReturnType<typeof reasonPlanRows>;
const REASON_COLUMNS: Columns<ReasonRows['upserts'][number]> = [
  ['batch_id', 'text'],
  ['group_id', 'text'],
  ['item_index', 'integer'],
  ['error', 'text'],
  ['failed_at', 'bigint'],
];
const REASON_KEY_COLUMNS: Columns<ReasonRows['deletes'][number]> = [
  ['batch_id', 'text'],
  ['group_id', 'text'],
  ['item_index', 'integer'],
];

const EVENT_COLUMNS: Columns<ReturnType<typeof eventRow>> = [
  ['id', 'text'],
  ['batch_id', 'text'],
  ['tenant', 'text'],
  ['host', 'text'],
  ['event', 'text'],
  ['url', 'text'],
  ['payload', 'text'],
  ['status', 'text'],
  ['attempts', 'integer'],
  ['next_attempt_at', 'bigint'],
  ['created_at', 'bigint'],
];

const CHILD_OUTCOME_COLUMNS: Columns<ReturnType<typeof childOutcomeRow>> = [
  ['batch_id', 'text'],
  ['tenant', 'text'],
  ['parent_item', 'text'],
  ['outcome', 'text'],
  ['error', 'text'],
  ['next_attempt_at', 'bigint'],
  ['attempts', 'integer'],
  ['created_at', 'bigint'],
];

/** `INSERT … SELECT FROM unnest(…)`, with `tail` (an ON CONFLICT clause) after it. */
function insertRows<Row>(binder: Binder, table: string, columns: Columns<Row>, rows: Row[], tail = ''): string {
  return `INSERT INTO ${table} (${names(columns)}) SELECT ${names(columns)} FROM ${binder.unnest('u', columns, rows)}${tail}`;
}

/** SET col = u.col for each column but the key. */
const setFromU = <Row>(columns: Columns<Row>) =>
  columns
    .slice(1)
    .map(([name]) => `${name} = u.${name}`)
    .join(', ');

/**
 * The writes as data-modifying CTEs of one statement, only the kinds there are. No two of them
 * touch the same row (a plan's reason upserts and deletes are disjoint), as one statement requires.
 */
function writeStatements(writes: AckWrites): PgStatement[] {
  const binder = new Binder();
  const parts: string[] = [];
  if (writes.groups.length > 0) {
    const tail =
      ' ON CONFLICT (batch_id, id) DO UPDATE SET pending = excluded.pending, succeeded_bits = excluded.succeeded_bits, failed_bits = excluded.failed_bits';
    parts.push(insertRows(binder, 'item_groups', GROUP_COLUMNS, writes.groups.map(groupRow), tail));
  }
  if (writes.batches.length > 0) {
    const rows = writes.batches.map((batch) => ({ id: batch.id, ...batchUpdate(batch) }));
    parts.push(`UPDATE batches AS t SET ${setFromU(BATCH_COLUMNS)} FROM ${binder.unnest('u', BATCH_COLUMNS, rows)} WHERE t.id = u.id`);
  }
  const reasons = writes.reasons.map(({ batchId, plan, at }) => reasonPlanRows(batchId, plan, at));
  const upserts = reasons.flatMap((r) => r.upserts);
  const deletes = reasons.flatMap((r) => r.deletes);
  if (upserts.length > 0) {
    const tail = ' ON CONFLICT (batch_id, group_id, item_index) DO UPDATE SET error = excluded.error, failed_at = excluded.failed_at';
    parts.push(insertRows(binder, 'failure_reasons', REASON_COLUMNS, upserts, tail));
  }
  if (deletes.length > 0) {
    const match = 't.batch_id = u.batch_id AND t.group_id = u.group_id AND t.item_index = u.item_index';
    parts.push(`DELETE FROM failure_reasons AS t USING ${binder.unnest('u', REASON_KEY_COLUMNS, deletes)} WHERE ${match}`);
  }
  if (writes.events.length > 0) parts.push(insertRows(binder, 'outbox', EVENT_COLUMNS, writes.events.map(eventRow)));
  if (writes.childOutcomes.length > 0) parts.push(insertRows(binder, 'child_outcomes', CHILD_OUTCOME_COLUMNS, writes.childOutcomes.map(childOutcomeRow)));
  if (parts.length === 0) return [];
  return [prepared(`WITH ${parts.map((part, i) => `w${i} AS (${part})`).join(',\n')}\nSELECT 1`, binder.values)];
}

/** The ack transaction as pgReadDecideWrite runs it. */
export function pgAckWork<T>(reads: AckReads, decide: (rows: AckRows) => { writes: AckWrites; answer: T }): PgReadDecideWrite<T> {
  return {
    reads: readStatements(reads),
    decide(rows) {
      const { writes, answer } = decide(rowsRead(reads, rows));
      return { writes: writeStatements(writes), answer };
    },
  };
}
