import type { AckCall } from './ackCall';

/**
 * The failure-reason rules of one batch, pure: at most `cap` reasons are kept; a failure beyond it is
 * only counted (`dropped`), once; the latest reason of a kept item wins; an item whose retry won leaves
 * the list, which makes room again. Storage therefore never grows past the cap, whatever the number
 * of failed items.
 */

/** Something an ack transaction did to one item of the batch, in the order it happened. */
export type ReasonTouch =
  /**
   * The item was acked failed with an error: newly failed, or failed `again` (a duplicate: the latest
   * reason wins). A failure again is never counted dropped: it was counted when it first failed, and
   * a redelivered ack must not count it twice.
   */
  | { kind: 'failed'; key: string; error: string; again?: boolean }
  /** The item was failed and a later ack succeeded (a retry won): its reason goes. */
  | { kind: 'cleared'; key: string };

export interface ReasonPlan {
  /** Reasons to write (insert or replace), by item key. */
  upserts: Map<string, string>;
  /** Item keys whose reason is removed (absent ones cost nothing). */
  deletes: Set<string>;
  /** Failures whose reason was not kept. */
  dropped: number;
}

/**
 * What a transaction read of one batch's stored reasons: how many there are, and which of the keys
 * its calls name in that batch are among them (`named`). Not every stored key: a batch keeps up to
 * the cap (1,000), and one call naming 10,000 batches with full lists read ten million rows.
 */
export interface StoredReasonKeys {
  count: number;
  named: ReadonlySet<string>;
}

/**
 * Applies touches in order to the reasons already stored. `stored` may be null only when no touch is
 * a failure (clearing needs no count, so the ack hot path of successes never reads the table).
 * `named` holds every key the touches name that is stored (runsNamedByFailures reads them all); a
 * cleared key it does not hold leaves the count as it is, so the list could never pass the cap.
 */
export function planFailureReasons(stored: StoredReasonKeys | null, touches: readonly ReasonTouch[], cap: number): ReasonPlan {
  const kept = new Set(stored?.named ?? []);
  let count = stored?.count ?? 0;
  const plan: ReasonPlan = { upserts: new Map(), deletes: new Set(), dropped: 0 };
  for (const touch of touches) {
    if (touch.kind === 'cleared') {
      if (kept.delete(touch.key)) count -= 1;
      plan.upserts.delete(touch.key);
      plan.deletes.add(touch.key);
      continue;
    }
    if (stored === null) throw new Error('failure reasons must be read before a failure with an error is planned');
    if (kept.has(touch.key) || count < cap) {
      if (!kept.has(touch.key)) count += 1;
      kept.add(touch.key);
      plan.upserts.set(touch.key, touch.error);
      plan.deletes.delete(touch.key);
    } else if (!touch.again) {
      plan.dropped += 1;
    }
  }
  return plan;
}

/** Items of one group, `from` to `to` (inclusive), of one batch. */
export interface IndexRun {
  batchId: string;
  groupId: string;
  from: number;
  to: number;
}

/** Batches named by calls that carry a failure reason (not batches known to be others'), in id order: only their stored reasons are read. */
export function batchesNamedByFailures(calls: readonly AckCall[]): string[] {
  const ids = new Set<string>();
  for (const call of calls) if (call.error !== undefined) for (const target of call.targets) if (!target.foreign) ids.add(target.batchId);
  return [...ids].sort();
}

/** The largest index a stored reason can have (a 32-bit column); a larger one is index_out_of_range anyway. */
const MAX_STORED_INDEX = 2 ** 31 - 1;

/**
 * The items whose stored reasons a transaction reads (StoredReasonKeys), as runs of consecutive
 * indexes per group (a compact range is one run): in each batch named by a call that fails items
 * with an error, the items every call names, successes too, so that a retry winning in the same
 * round as a failure makes its room for it there and then.
 */
export function runsNamedByFailures(calls: readonly AckCall[]): IndexRun[] {
  const batches = new Set(batchesNamedByFailures(calls));
  const byGroup = new Map<string, { batchId: string; groupId: string; indexes: number[] }>();
  for (const call of calls) {
    for (const target of call.targets) {
      if (target.foreign || !batches.has(target.batchId)) continue;
      const key = `${target.batchId}:${target.groupId}`;
      let group = byGroup.get(key);
      if (!group) byGroup.set(key, (group = { batchId: target.batchId, groupId: target.groupId, indexes: [] }));
      for (const index of target.indexes) if (index <= MAX_STORED_INDEX) group.indexes.push(index);
    }
  }
  const runs: IndexRun[] = [];
  for (const { batchId, groupId, indexes } of byGroup.values()) {
    indexes.sort((a, b) => a - b);
    let run: IndexRun | null = null;
    for (const index of indexes) {
      if (run && index <= run.to + 1) run.to = Math.max(run.to, index);
      else runs.push((run = { batchId, groupId, from: index, to: index }));
    }
  }
  return runs;
}

/** `<groupId>:<index>`: an item within its batch. */
export const reasonKey = (groupId: string, index: number): string => `${groupId}:${index}`;

/**
 * The time a transaction stamps a batch's reasons with: its own clock's, unless a reason already
 * stored (the newest, `newestStored`) is as new or newer. Pages of reasons are read in (failed_at,
 * group, index) order, after the last one read: a reason stamped earlier than one already read, by a
 * replica whose clock runs behind (or after a clock stepped back), was never listed in that pass.
 * Under the batch's row lock, so each batch's reasons are stamped in the order they were written.
 * Only the reasons still kept count: one whose item's retry won is deleted, and with it its time.
 */
export function reasonTime(now: number, newestStored = 0): number {
  return newestStored >= now ? newestStored + 1 : now;
}
