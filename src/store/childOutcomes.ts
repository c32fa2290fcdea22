import { Knex } from 'knex';

import { Outcome } from '../domain/batch';
import { Db, Queryable } from './db';
import { outsideAll } from './ranges';

/** A finished child batch's outcome, waiting to be acked into its parent item. */
export interface ChildOutcome {
  /** The child batch. */
  batchId: string;
  tenant: string;
  parentItem: string;
  outcome: Outcome;
  error: string | null;
  attempts: number;
}

interface ChildOutcomeRow {
  batch_id: string;
  tenant: string;
  parent_item: string;
  outcome: string;
  error: string | null;
  attempts: number | string;
}

/** What a new outcome row needs: the child's end, and when it becomes due. */
export type NewChildOutcome = Omit<ChildOutcome, 'attempts'> & { createdAt: number };

/** Writes the outcome row; runs in the child's completing or cancelling transaction (one row per child, ever). */
export function insertChildOutcomeQuery(q: Queryable, row: NewChildOutcome): Knex.QueryBuilder {
  return q('child_outcomes').insert(childOutcomeRow(row));
}

/** A new outcome as its row's columns. */
export function childOutcomeRow(row: NewChildOutcome) {
  return {
    batch_id: row.batchId,
    tenant: row.tenant,
    parent_item: row.parentItem,
    outcome: row.outcome,
    error: row.error,
    next_attempt_at: row.createdAt,
    attempts: 0,
    created_at: row.createdAt,
  };
}

/** A due outcome as the dispatcher chooses among them, before it claims any. */
export interface DueChildOutcome {
  batchId: string;
  tenant: string;
}

/**
 * Up to `limit` due rows, oldest due first, leaving out `exceptTenants` as index ranges (`outsideAll`;
 * the index of 0021), so one tenant's backlog of thousands does not hide the others' rows. A plain
 * read that locks nothing: claimChildOutcomes then takes the ones chosen, if still due.
 */
export async function dueChildOutcomes(q: Queryable, now: number, limit: number, exceptTenants: readonly string[]): Promise<DueChildOutcome[]> {
  let due = q('child_outcomes').select('batch_id', 'tenant').where('next_attempt_at', '<=', now);
  if (exceptTenants.length > 0) due = due.where(outsideAll('tenant', exceptTenants));
  const rows = (await due.orderBy('next_attempt_at').limit(limit)) as Array<{ batch_id: string; tenant: string }>;
  return rows.map((row) => ({ batchId: row.batch_id, tenant: row.tenant }));
}

/**
 * Claims the chosen rows for `leaseMs` (like the outbox): a replica that dies mid-work leaves them
 * due again when the lease ends. One conditional UPDATE takes those still due (a row another replica
 * took first is left alone), with no locking read that spans batches (Citus refuses one;
 * outbox.ts claimEvents). Returns the rows taken, in the order of `batchIds`.
 */
export async function claimChildOutcomes(q: Queryable, batchIds: readonly string[], claim: string, now: number, leaseMs: number): Promise<ChildOutcome[]> {
  if (batchIds.length === 0) return [];
  await q('child_outcomes')
    .whereIn('batch_id', batchIds)
    .where('next_attempt_at', '<=', now)
    .update({ claim, next_attempt_at: now + leaseMs, attempts: q.raw('attempts + 1') });
  const rows = (await q('child_outcomes')
    .whereIn('batch_id', batchIds)
    .where('claim', claim)
    .where('next_attempt_at', now + leaseMs)) as ChildOutcomeRow[];
  const taken = new Map(rows.map((row) => [row.batch_id, row]));
  return batchIds.flatMap((id) => {
    const row = taken.get(id);
    return row ? [childOutcomeOf(row)] : [];
  });
}

function childOutcomeOf(row: ChildOutcomeRow): ChildOutcome {
  return {
    batchId: row.batch_id,
    tenant: row.tenant,
    parentItem: row.parent_item,
    outcome: row.outcome as Outcome,
    error: row.error,
    attempts: Number(row.attempts),
  };
}

/**
 * Extends the lease of those of `batchIds` this claim still holds, to `until`, and returns them. A
 * row whose lease ran out and that another replica claimed since is that replica's now (it checks
 * the claim too), and one deleted or put back is no one's: both are left alone.
 */
export async function renewChildOutcomes(q: Queryable, batchIds: string[], claim: string, until: number): Promise<Set<string>> {
  const renewed = await q('child_outcomes').whereIn('batch_id', batchIds).where('claim', claim).update({ next_attempt_at: until });
  if (renewed === batchIds.length) return new Set(batchIds); // rows matched (mysql2 asks for found rows), so all still held
  const held = (await q('child_outcomes').select('batch_id').whereIn('batch_id', batchIds).where('claim', claim)) as Array<{ batch_id: string }>;
  return new Set(held.map((row) => row.batch_id));
}

/** Removes a row whose parent ack has committed. Only the claim holder may. */
export async function deleteChildOutcome(db: Db, batchId: string, claim: string): Promise<void> {
  await db('child_outcomes').where({ batch_id: batchId, claim }).delete();
}

/** Gives a row back for a later attempt (the parent ack failed, e.g. the database was away). */
export async function retryChildOutcomeLater(db: Db, batchId: string, claim: string, nextAttemptAt: number): Promise<void> {
  await db('child_outcomes').where({ batch_id: batchId, claim }).update({ claim: null, next_attempt_at: nextAttemptAt });
}

/** Rows still waiting (for operators and tests). */
export async function countChildOutcomes(q: Queryable): Promise<number> {
  const [row] = (await q('child_outcomes').count({ n: '*' })) as Array<{ n: number | string }>;
  return Number(row?.n ?? 0);
}
