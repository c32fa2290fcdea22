import { type BatchOutcome, type BatchState, MAX_GROUPS_PER_ADD } from '../contract/vocabulary';

export type { BatchOutcome, BatchState, Outcome } from '../contract/vocabulary';

/** Terminal states: nothing about such a batch changes any more. */
export const isFinished = (state: BatchState): boolean => state === 'complete' || state === 'cancelled';

/** Who is asking: batches belong to the tenant that created them ('' without authentication). */
export interface Caller {
  tenant: string;
}

/** The caller of a service that runs without tokens. */
export const OPEN_CALLER: Caller = { tenant: '' };

/** A batch as the service knows it; times are epoch milliseconds. */
export interface BatchRecord {
  id: string;
  tenant: string;
  state: BatchState;
  userKey: string | null;
  metadata: Record<string, unknown> | null;
  callbackUrl: string | null;
  total: number;
  succeeded: number;
  failed: number;
  /** Groups that still have at least one item without an outcome. */
  openGroups: number;
  createdAt: number;
  updatedAt: number;
  sealedAt: number | null;
  completedAt: number | null;
  cancelledAt: number | null;
  /** The item of another batch this batch (a child) stands for; null for a root. */
  parentItem: string | null;
  /** When the first item of this batch failed (the batch.first_failure event is written once, then). */
  firstFailureAt: number | null;
  /** Failure reasons not kept because the batch already held FAILURE_REASONS_PER_BATCH of them. */
  failuresDropped: number;
}

export function batchOutcome(batch: Pick<BatchRecord, 'state' | 'failed'>): BatchOutcome | null {
  if (batch.state === 'cancelled') return 'cancelled';
  if (batch.state !== 'complete') return null;
  return batch.failed === 0 ? 'succeeded' : 'failed';
}

/**
 * Seals an open batch in memory. A batch whose groups all have outcomes (or that has none) is
 * complete at once; the caller writes the result in the transaction that holds the batch row.
 */
export function seal(batch: BatchRecord, now: number): BatchRecord {
  const complete = batch.openGroups === 0;
  return {
    ...batch,
    state: complete ? 'complete' : 'sealed',
    sealedAt: now,
    completedAt: complete ? now : null,
    updatedAt: now,
  };
}

/**
 * Cancels a batch that is not finished, in memory: terminal, counts kept as they are. The caller
 * holds the batch row lock, so a cancel and the ack or seal that would complete the batch never both win.
 */
export function cancelled(batch: BatchRecord, now: number): BatchRecord {
  return { ...batch, state: 'cancelled', cancelledAt: now, updatedAt: now };
}

export { MAX_GROUPS_PER_ADD } from '../contract/vocabulary';

/** The most items one add takes with groups of `groupSize`. */
export const maxItemsPerAdd = (groupSize: number): number => groupSize * MAX_GROUPS_PER_ADD;

/** Splits `count` new items into group sizes of at most `groupSize`. */
export function groupSizes(count: number, groupSize: number): number[] {
  const sizes: number[] = [];
  for (let left = count; left > 0; left -= groupSize) sizes.push(Math.min(left, groupSize));
  return sizes;
}
