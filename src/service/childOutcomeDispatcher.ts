import { randomUUID } from 'node:crypto';

import { AckCall, callFromIds } from '../domain/ackCall';
import { retryDelay } from '../domain/delivery';
import { toError } from '../domain/errors';
import { crowdingTenants, inTurns } from '../domain/fairShare';
import { UUID_LENGTH } from '../domain/itemId';
import {
  ChildOutcome,
  claimChildOutcomes,
  deleteChildOutcome,
  DueChildOutcome,
  dueChildOutcomes,
  renewChildOutcomes,
  retryChildOutcomeLater,
} from '../store/childOutcomes';
import { inTransaction } from '../store/transaction';
import { ackItems } from './ackItems';
import { ServiceDeps } from './deps';

/** A claim outlives one ack transaction by far; a replica that died holding it frees the rows then. */
const LEASE_MS = 5_000;
/** How many lock waits an ack transaction may have: the batch row's, then its group rows'. */
const LOCK_WAITS_PER_ACK = 2;
const BATCH = 100;
/** Reads of due rows per claim at most: each leaves out the tenants that crowded the reads before it. */
const READS_PER_CLAIM = 4;
/** A tenant with this many of a read's rows may hide others' rows behind it: the next read leaves it out. */
const CROWDING = BATCH / 10;

/** The parent-item ack a finished child stands for. */
function parentAck(row: ChildOutcome): AckCall {
  const call = callFromIds([row.parentItem], row.outcome, row.tenant);
  if (row.outcome === 'failed' && row.error !== null) call.error = row.error;
  return call;
}

/**
 * Turns finished children into acks of their parent items. The child's end wrote a child_outcomes
 * row in its own transaction; this loop claims due rows with a lease (so replicas do not work on
 * the same row at once), acks the parent items in ordinary ack transactions, one per parent batch,
 * and deletes the rows after each committed. A crash between the ack and the delete repeats the
 * ack, which is then a duplicate: the parent item gets its outcome at least once, counted once.
 */
export class ChildOutcomeDispatcher {
  private readonly claim = randomUUID();
  /**
   * The lease each parent batch's rows get just before their ack: longer than that ack's lock waits
   * (its batch row's, then its group rows', each up to LOCK_TIMEOUT, which MySQL counts in whole
   * seconds). An ack retried after deadlocks, or slow for other reasons, can still outlive it: then
   * another replica may ack the same rows too, a duplicate counted once.
   */
  private readonly ackLeaseMs: number;
  /** Set at shutdown: the round under way is the last (a backlog held the shutdown until it was gone). */
  private stopped = false;

  constructor(private readonly deps: ServiceDeps) {
    this.ackLeaseMs = LEASE_MS + LOCK_WAITS_PER_ACK * Math.ceil((deps.tx.lockTimeoutMs ?? 0) / 1000) * 1000;
  }

  stop(): void {
    this.stopped = true;
  }

  /**
   * Acks every due child outcome; returns how many rows it acked (not those another replica claimed
   * once their lease here ran out). Throws, once the rest are done, the first failure of a row it
   * put off (its parent's row held past LOCK_TIMEOUT, say).
   */
  async deliverDue(): Promise<number> {
    let handled = 0;
    while (!this.stopped) {
      const rows = await this.claimDue();
      if (rows.length === 0) return handled;
      const { acked, firstError } = await this.ackParents(rows);
      handled += acked;
      if (firstError) throw firstError;
    }
    return handled;
  }

  /**
   * Claims up to BATCH due rows, taken from each tenant in turns: the oldest due rows, and when one
   * tenant's backlog crowds them, the oldest of the other tenants' too (read again without it), so a
   * tenant that finished hundreds of thousands of children at once makes the others' parent items
   * wait one claim, not behind its backlog (docs/security.md). The reads lock nothing and run before
   * the claim's transaction: on SQLite that transaction holds the file's one write lock, which acks
   * would wait for meanwhile.
   */
  private async claimDue(): Promise<ChildOutcome[]> {
    const now = this.deps.now();
    const seen = new Map<string, DueChildOutcome>(); // a later read returns the uncrowded tenants' rows again
    const leftOut: string[] = [];
    for (let read = 0; read < READS_PER_CLAIM; read++) {
      const due = await dueChildOutcomes(this.deps.db, now, BATCH, leftOut);
      for (const row of due) if (!seen.has(row.batchId)) seen.set(row.batchId, row);
      const crowding = crowdingTenants(due, CROWDING);
      if (due.length < BATCH || crowding.length === 0) break;
      leftOut.push(...crowding);
    }
    const chosen = inTurns([...seen.values()], BATCH).map((row) => row.batchId);
    if (chosen.length === 0) return [];
    return inTransaction(this.deps.db, this.deps.tx, (trx) => claimChildOutcomes(trx, chosen, this.claim, now, LEASE_MS));
  }

  /**
   * Acks the parent items of `rows`, one transaction for each parent batch: a transaction that spans
   * parents would hold one parent's row (other tenants' among them) while it waits up to LOCK_TIMEOUT
   * for another's that is held, delaying every ack of the first. Each parent's rows have their lease
   * renewed first: parents held before them may have outlived the claim's, and a row another replica
   * claimed since is left to it rather than acked by both. A parent that cannot be acked now puts off
   * only its own children's outcomes. When the put-off fails too (the database is away), the round
   * ends there: the rest would wait the same way, each for the pool's acquire timeout, and their
   * leases run out meanwhile; they are due again when those end.
   */
  private async ackParents(rows: ChildOutcome[]): Promise<{ acked: number; firstError: Error | null }> {
    let acked = 0;
    let firstError: Error | null = null;
    for (const group of byParentBatch(rows)) {
      let children = group;
      try {
        children = await this.stillHeld(group);
        if (children.length === 0) continue;
        await ackItems(this.deps, children.map(parentAck));
        await this.cleared(children);
        acked += children.length;
      } catch (caught) {
        const error = toError(caught);
        this.deps.log.warn(
          { err: error, parentItems: children.map((row) => row.parentItem) },
          'acking parent items (or renewing their lease) failed; will retry',
        );
        firstError ??= error;
        if (!(await this.putOff(children))) break;
      }
    }
    return { acked, firstError };
  }

  /** Those of `rows` this dispatcher still holds, each with its lease renewed for one ack. */
  private async stillHeld(rows: ChildOutcome[]): Promise<ChildOutcome[]> {
    const ids = rows.map((row) => row.batchId);
    // A transaction for its retries (a deadlock, a Galera conflict) and SQLite's wait for the file.
    const held = await inTransaction(this.deps.db, this.deps.tx, (trx) => renewChildOutcomes(trx, ids, this.claim, this.deps.now() + this.ackLeaseMs));
    return rows.length === held.size ? rows : rows.filter((row) => held.has(row.batchId));
  }

  /** Puts rows off, each with a growing delay; false when that failed too (the database is away). */
  private async putOff(rows: ChildOutcome[]): Promise<boolean> {
    try {
      for (const row of rows) {
        const later = this.deps.now() + retryDelay({ baseMs: 1000, capMs: 60_000 }, row.attempts);
        await retryChildOutcomeLater(this.deps.db, row.batchId, this.claim, later);
      }
      return true;
    } catch (caught) {
      this.deps.log.warn({ err: caught }, 'putting child outcomes off failed; the round ends, and they are due again when their leases end');
      return false;
    }
  }

  /**
   * Whatever the ack answered (acked, duplicate, or rejected because the parent is gone or
   * cancelled), nothing more can be done for these children.
   */
  private async cleared(rows: ChildOutcome[]): Promise<void> {
    for (const row of rows) await deleteChildOutcome(this.deps.db, row.batchId, this.claim);
  }
}

/** Rows grouped by their parent item's batch, in the order first seen. */
function byParentBatch(rows: ChildOutcome[]): ChildOutcome[][] {
  const groups = new Map<string, ChildOutcome[]>();
  for (const row of rows) {
    const parent = row.parentItem.slice(0, UUID_LENGTH);
    const group = groups.get(parent);
    if (group) group.push(row);
    else groups.set(parent, [row]);
  }
  return [...groups.values()];
}
