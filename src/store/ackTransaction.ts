import { groupKey, GroupRecord } from '../domain/ackPlan';
import { BatchRecord } from '../domain/batch';
import { IndexRun, ReasonPlan } from '../domain/failureReasons';
import { batchFromRow, BatchRow, lockBatchQuery, updateBatchQuery } from './batches';
import { insertChildOutcomeQuery, NewChildOutcome } from './childOutcomes';
import { Db, Queryable, Statement } from './db';
import { namedReasonsQueries, namedReasonsStatementCount, reasonCountQuery, StoredReasons, storedReasonsFrom, writeReasonsQueries } from './failureReasons';
import { groupFromRow, GroupRow, lockGroupsQueries, writeGroupsQueries } from './groups';
import { insertEventQuery, NewEvent } from './outbox';
import { pgAckWork } from './pgAckStatements';
import { readDecideWrite } from './readDecideWrite';
import { TransactionOptions } from './transaction';

/** What an ack transaction reads: these groups of these batches, and of some batches' stored reasons. */
export interface AckReads {
  groupIdsByBatch: Map<string, Set<string>>;
  /** Batches whose stored failure reasons are counted (only those named by failures with an error). */
  reasonBatches: string[];
  /** The items named by failures with an error, whose stored reasons are read (runsNamedByFailures). */
  reasonRuns: IndexRun[];
}

/** The rows an ack transaction read, as plain records. Unknown batches and groups are simply absent. */
export interface AckRows {
  batches: Map<string, BatchRecord>;
  /** By groupKey(batchId, groupId), as the ack planner looks them up. */
  groups: Map<string, GroupRecord>;
  /** Stored reasons (their count, newest time, and which named items have one) per batch of AckReads.reasonBatches. */
  storedReasons: Map<string, StoredReasons>;
}

/** What an ack transaction writes, as plain records. */
export interface AckWrites {
  groups: GroupRecord[];
  batches: BatchRecord[];
  /** Each batch's reason writes, stamped `at` (reasonTime). */
  reasons: Array<{ batchId: string; plan: ReasonPlan; at: number }>;
  events: NewEvent[];
  childOutcomes: NewChildOutcome[];
}

/**
 * The ack transaction: locking reads in the one lock order (batch rows by id, then each batch's named
 * group rows by id, then stored reason keys), a pure decision from the rows, and its writes. Runs
 * again from the start after a deadlock (readDecideWrite.ts), so `decide` must have no side effects.
 * On PostgreSQL the reads and the writes are each one statement over bound arrays (pgAckStatements.ts).
 */
export function runAckTransaction<T>(
  db: Db,
  options: TransactionOptions,
  reads: AckReads,
  decide: (rows: AckRows) => { writes: AckWrites; answer: T },
): Promise<T> {
  return readDecideWrite(db, options, {
    reads: (q) => [
      ...targetReads(q, reads.groupIdsByBatch),
      ...reads.reasonBatches.map((id) => reasonCountQuery(q, id)),
      ...namedReasonsQueries(q, reads.reasonRuns),
    ],
    decide(q, results) {
      const targetCount = results.length - reads.reasonBatches.length - namedReasonsStatementCount(reads.reasonRuns);
      const counts = results.slice(targetCount, targetCount + reads.reasonBatches.length);
      const storedReasons = storedReasonsFrom(reads.reasonBatches, counts, results.slice(targetCount + reads.reasonBatches.length));
      const { writes, answer } = decide({ ...targetsFrom(results.slice(0, targetCount), reads.groupIdsByBatch.size), storedReasons });
      return { writes: ackWrites(q, writes), answer };
    },
    asPgStatements: () => pgAckWork(reads, decide),
  });
}

function targetReads(q: Queryable, groupIdsByBatch: Map<string, Set<string>>): Statement[] {
  const batchIds = [...groupIdsByBatch.keys()].sort();
  if (batchIds.length === 0) return [];
  return [...batchIds.map((id) => lockBatchQuery(q, id)), ...batchIds.flatMap((id) => lockGroupsQueries(q, id, groupIdsByBatch.get(id) ?? []))];
}

function targetsFrom(results: unknown[], batchCount: number): Pick<AckRows, 'batches' | 'groups'> {
  const batchRows = (results.slice(0, batchCount) as BatchRow[][]).flat();
  const groupRows = results.slice(batchCount) as GroupRow[][];
  return {
    batches: new Map(batchRows.map((row) => [row.id, batchFromRow(row)])),
    groups: new Map(groupRows.flat().map((row) => [groupKey(row.batch_id, row.id), groupFromRow(row)])),
  };
}

function ackWrites(q: Queryable, writes: AckWrites): Statement[] {
  return [
    ...writeGroupsQueries(q, writes.groups),
    ...writes.batches.map((batch) => updateBatchQuery(q, batch)),
    ...writes.reasons.flatMap(({ batchId, plan, at }) => writeReasonsQueries(q, batchId, plan, at)),
    ...finishRowsQueries(q, writes),
  ];
}

/** The rows a batch's end writes beside it: its callback events and, for a child, its parent item's outcome. */
export interface FinishRows {
  events: NewEvent[];
  childOutcomes: NewChildOutcome[];
}

function finishRowsQueries(q: Queryable, rows: FinishRows): Statement[] {
  return [...rows.events.map((event) => insertEventQuery(q, event)), ...rows.childOutcomes.map((row) => insertChildOutcomeQuery(q, row))];
}

/** Inserts the finish rows in `trx` (seal and cancel, which end a batch outside the ack transaction). */
export async function insertFinishRows(trx: Queryable, rows: FinishRows): Promise<void> {
  for (const insert of finishRowsQueries(trx, rows)) await insert;
}
