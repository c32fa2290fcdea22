/**
 * The failure-reason rules of one batch, pure: at most `cap` reasons are kept; a failure beyond it is
 * only counted (`dropped`); the latest reason of a kept item wins; an item whose retry won leaves
 * the list, which makes room again. Storage therefore never grows past the cap, whatever the number
 * of failed items.
 */

/** Something an ack transaction did to one item of the batch, in the order it happened. */
export type ReasonTouch =
  /** The item was acked failed with an error (newly failed, or failed again: the latest reason wins). */
  | { kind: 'failed'; key: string; error: string }
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
 * Applies touches in order to the keys already stored. `stored` may be null only when no touch is a
 * failure (clearing needs no count, so the ack hot path of successes never reads the table).
 */
export function planFailureReasons(stored: ReadonlySet<string> | null, touches: readonly ReasonTouch[], cap: number): ReasonPlan {
  const kept = new Set(stored ?? []);
  const plan: ReasonPlan = { upserts: new Map(), deletes: new Set(), dropped: 0 };
  for (const touch of touches) {
    if (touch.kind === 'cleared') {
      kept.delete(touch.key);
      plan.upserts.delete(touch.key);
      plan.deletes.add(touch.key);
      continue;
    }
    if (stored === null) throw new Error('failure reasons must be read before a failure with an error is planned');
    if (kept.has(touch.key) || kept.size < cap) {
      kept.add(touch.key);
      plan.upserts.set(touch.key, touch.error);
      plan.deletes.delete(touch.key);
    } else {
      plan.dropped += 1;
    }
  }
  return plan;
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
