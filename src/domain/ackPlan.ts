import type { ItemState } from '../contract/vocabulary';
import { AckCall, AckTarget, Rejection } from './ackCall';
import { BatchRecord, Outcome } from './batch';
import { Bitfield } from './bitfield';
import { planFailureReasons, reasonKey, ReasonPlan, ReasonTouch, StoredReasonKeys } from './failureReasons';

/** A group row as stored: bits are null while all zero. */
export interface GroupRecord {
  batchId: string;
  id: string;
  size: number;
  pending: number;
  succeededBits: Buffer | null;
  failedBits: Buffer | null;
}

export interface CallResult {
  acked: number;
  duplicates: number;
  rejected: Rejection[];
  completedBatchIds: string[];
}

/** The first item of a batch that failed, in the transaction that failed it (batch.first_failure). */
export interface FirstFailure {
  batchId: string;
  itemId: string;
  error: string | null;
}

export interface AckPlan {
  results: CallResult[];
  groupWrites: GroupRecord[];
  batchWrites: BatchRecord[];
  /** Failure-reason changes per batch; only batches that failed items with an error, or had a retry win. */
  reasonWrites: Array<{ batchId: string; plan: ReasonPlan }>;
  firstFailures: FirstFailure[];
}

/** What the ack transaction read of the failure reasons, and the cap it applies. */
export interface ReasonContext {
  /** What was read of the stored reasons per batch, for the batches that calls with an `error` name. */
  stored: ReadonlyMap<string, StoredReasonKeys>;
  cap: number;
}

/** An item's state as its group's bits say: succeeded wins over failed (a retry that won clears failed). */
export function itemState(group: GroupRecord, index: number): ItemState {
  if (Bitfield.from(group.succeededBits, group.size).has(index)) return 'succeeded';
  return Bitfield.from(group.failedBits, group.size).has(index) ? 'failed' : 'pending';
}

export const groupKey = (batchId: string, groupId: string): string => `${batchId}:${groupId}`;

/** Working copy of a group while a plan is made; bitfields are decoded on first touch. */
class GroupWork {
  private succeeded: Bitfield | null = null;
  private failed: Bitfield | null = null;
  changed = false;
  pending: number;

  constructor(readonly stored: GroupRecord) {
    this.pending = stored.pending;
  }

  /**
   * Applies one outcome to one item; returns whether anything changed and whether it was pending.
   * `failed_again` is a duplicate too, told apart because its failure reason still counts.
   */
  apply(index: number, outcome: Outcome): 'new' | 'retry_won' | 'duplicate' | 'failed_again' {
    const succeeded = (this.succeeded ??= Bitfield.from(this.stored.succeededBits, this.stored.size));
    if (succeeded.has(index)) return 'duplicate';
    const failed = (this.failed ??= Bitfield.from(this.stored.failedBits, this.stored.size));
    const wasFailed = failed.has(index);
    if (outcome === 'failed') {
      if (wasFailed) return 'failed_again';
      failed.set(index);
    } else {
      succeeded.set(index);
      if (wasFailed) failed.clear(index);
    }
    this.changed = true;
    if (wasFailed) return 'retry_won';
    this.pending -= 1;
    return 'new';
  }

  toRecord(): GroupRecord {
    return {
      ...this.stored,
      pending: this.pending,
      succeededBits: this.succeeded ? orNull(this.succeeded) : this.stored.succeededBits,
      failedBits: this.failed ? orNull(this.failed) : this.stored.failedBits,
    };
  }
}

function orNull(field: Bitfield): Buffer | null {
  return field.isEmpty() ? null : field.toBuffer();
}

/**
 * Applies ack calls, in order, to the locked rows they touch. Pure: the caller loaded `batches`
 * and `groups` inside one transaction and writes `groupWrites` and `batchWrites` back in it.
 * Completion is attributed to the one call whose item left a sealed batch with no open group;
 * after that the batch is frozen and every later ack of it is a duplicate. A cancelled batch rejects
 * its items' acks. Failures with an error and retries that won are collected per batch and turned
 * into failure-reason writes under the cap (planFailureReasons).
 */
export function planAcks(
  calls: AckCall[],
  batches: ReadonlyMap<string, BatchRecord>,
  groups: ReadonlyMap<string, GroupRecord>,
  now: number,
  reasons: ReasonContext = { stored: new Map(), cap: 1000 },
): AckPlan {
  const planner = new AckPlanner(batches, groups, now);
  const results = calls.map((call) => planner.applyCall(call));
  return planner.finish(results, reasons);
}

/** The working copies of the rows that planAcks changes, and what it collects on the way. */
class AckPlanner {
  private readonly batchWork = new Map<string, BatchRecord>();
  private readonly groupWork = new Map<string, GroupWork>();
  private readonly changedBatches = new Set<string>();
  private readonly touches = new Map<string, ReasonTouch[]>();
  private readonly firstFailures: FirstFailure[] = [];

  constructor(
    private readonly batches: ReadonlyMap<string, BatchRecord>,
    private readonly groups: ReadonlyMap<string, GroupRecord>,
    private readonly now: number,
  ) {}

  /**
   * Applies one call whole, then completes the sealed batches it left without an open group: the
   * order of its IDs changes nothing (an item closing the batch before another of the same call,
   * a failed one acked `succeeded`, froze the batch with that item still failed). Later calls of
   * the same round see the batch complete, as if they came after.
   */
  applyCall(call: AckCall): CallResult {
    const result: CallResult = { acked: 0, duplicates: 0, rejected: [...call.malformed], completedBatchIds: [] };
    const closed = new Set<BatchRecord>();
    for (const target of call.targets) this.applyTarget(call, target, result, closed);
    for (const batch of closed) this.completeIfDone(batch, result);
    return result;
  }

  /** The items of one call that name one group; unknown batches (or other tenants') and groups are rejected. */
  private applyTarget(call: AckCall, target: AckTarget, result: CallResult, closed: Set<BatchRecord>): void {
    const found = this.batches.get(target.batchId);
    const stored = found && found.tenant === call.tenant && !target.foreign ? found : undefined;
    const key = groupKey(target.batchId, target.groupId);
    const storedGroup = stored ? this.groups.get(key) : undefined;
    if (!stored || !storedGroup) {
      const reason = stored ? 'unknown_group' : 'unknown_batch';
      for (const index of target.indexes) result.rejected.push({ id: target.prefix + index, reason });
      return;
    }
    let batch = this.batchWork.get(target.batchId);
    if (!batch) this.batchWork.set(target.batchId, (batch = { ...stored }));
    let group = this.groupWork.get(key);
    if (!group) this.groupWork.set(key, (group = new GroupWork(storedGroup)));
    for (const index of target.indexes) if (this.applyItem(call, target, batch, group, index, result)) closed.add(batch);
  }

  /** Applies one item; true when it closed its group (its last pending item). */
  private applyItem(call: AckCall, target: AckTarget, batch: BatchRecord, group: GroupWork, index: number, result: CallResult): boolean {
    if (index >= group.stored.size) {
      result.rejected.push({ id: target.prefix + index, reason: 'index_out_of_range' });
      return false;
    }
    // A cancelled batch refuses acks, so a worker can stop; they change nothing.
    if (batch.state === 'cancelled') {
      result.rejected.push({ id: target.prefix + index, reason: 'batch_cancelled' });
      return false;
    }
    // A complete batch never changes again: every valid ack of it is a duplicate.
    if (batch.state === 'complete') {
      result.duplicates += 1;
      return false;
    }
    const effect = group.apply(index, call.outcome);
    if (call.error !== undefined && (effect === 'new' || effect === 'failed_again')) {
      this.touch(batch.id, { kind: 'failed', key: reasonKey(target.groupId, index), error: call.error, again: effect === 'failed_again' });
    }
    if (effect === 'duplicate' || effect === 'failed_again') {
      result.duplicates += 1;
      return false;
    }
    result.acked += 1;
    this.changedBatches.add(batch.id);
    batch.updatedAt = this.now;
    if (effect === 'retry_won') {
      batch.failed -= 1;
      batch.succeeded += 1;
      this.touch(batch.id, { kind: 'cleared', key: reasonKey(target.groupId, index) });
      return false;
    }
    if (call.outcome === 'failed') this.countFailure(batch, `${batch.id}:${target.groupId}:${index}`, call.error);
    else batch.succeeded += 1;
    if (group.pending !== 0) return false;
    batch.openGroups -= 1;
    return true;
  }

  /** A new failure; the batch's first one is remembered for its batch.first_failure event. */
  private countFailure(batch: BatchRecord, itemId: string, error: string | undefined): void {
    batch.failed += 1;
    if (batch.firstFailureAt !== null) return;
    batch.firstFailureAt = this.now;
    this.firstFailures.push({ batchId: batch.id, itemId, error: error ?? null });
  }

  /** A sealed batch whose last open group this call closed is complete, in this call. */
  private completeIfDone(batch: BatchRecord, result: CallResult): void {
    if (batch.state !== 'sealed' || batch.openGroups !== 0) return;
    batch.state = 'complete';
    batch.completedAt = this.now;
    result.completedBatchIds.push(batch.id);
  }

  private touch(batchId: string, touch: ReasonTouch): void {
    let list = this.touches.get(batchId);
    if (!list) this.touches.set(batchId, (list = []));
    list.push(touch);
  }

  /** The writes: changed groups and batches, and each batch's failure reasons under the cap. */
  finish(results: CallResult[], reasons: ReasonContext): AckPlan {
    const reasonWrites = [...this.touches].map(([batchId, list]) => ({
      batchId,
      plan: planFailureReasons(reasons.stored.get(batchId) ?? null, list, reasons.cap),
    }));
    for (const { batchId, plan } of reasonWrites) {
      if (plan.dropped === 0) continue;
      (this.batchWork.get(batchId) as BatchRecord).failuresDropped += plan.dropped;
      this.changedBatches.add(batchId);
    }
    return {
      results,
      groupWrites: [...this.groupWork.values()].filter((g) => g.changed).map((g) => g.toRecord()),
      batchWrites: [...this.changedBatches].map((id) => this.batchWork.get(id) as BatchRecord),
      reasonWrites,
      firstFailures: this.firstFailures,
    };
  }
}
