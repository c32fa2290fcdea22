/**
 * `import { openBatch } from 'rollcall/producer'`: the producer's side in one call — open a batch,
 * add its items, hand their IDs to the queue in chunks, seal. Needs no queue library.
 */
import type { Batch, RollcallClient } from '../client';
import { RollcallApiError } from '../client/apiError';
import { DEFAULT_RETRY, withRetries } from '../client/retry';
import { MAX_GROUP_SIZE, MAX_GROUPS_PER_ADD, MIN_GROUP_SIZE } from '../contract/vocabulary';
import { IntegrationErrorCode, RollcallIntegrationError } from './errors';

/** What the integrations throw or report, with a stable `code`: `instanceof` it to tell them. */
export { type IntegrationErrorCode, RollcallIntegrationError } from './errors';

/** The most item IDs handed to `enqueue` at once. */
export const MAX_ENQUEUE_CHUNK = 1000;
/**
 * The most items one of the producer's adds carries; larger batches take several. Every add has an
 * Idempotency-Key, and a service takes at most MAX_GROUPS_PER_ADD groups in such an add, so a
 * service run with a GROUP_SIZE under 100 refused the API's 10,000,000 (400), at every try. This is
 * what every GROUP_SIZE takes, rounded down to whole MAX_GROUP_SIZEs (786,432), so that each add
 * fills whole groups for any GROUP_SIZE that is a power of two, the default 8,192 among them.
 */
export const MAX_ITEMS_PER_ADD = Math.floor((MIN_GROUP_SIZE * MAX_GROUPS_PER_ADD) / MAX_GROUP_SIZE) * MAX_GROUP_SIZE;

export interface OpenBatchInput {
  /** How many items (0 makes a batch that is complete at once). */
  count: number;
  userKey?: string;
  metadata?: Record<string, unknown>;
  callbackUrl?: string;
  /** An item ID of another batch: the new batch is a child standing for that item (`client.open`). */
  parentItem?: string;
  /**
   * Puts one job or message per item ID on the queue; called one chunk (≤ 1,000 IDs) at a time, in
   * order, each after the last one's promise (if it returns one) resolved. The array is the
   * callback's own: it may empty it.
   */
  enqueue: (itemIds: string[]) => unknown;
}

/**
 * Opens a batch, adds `count` items, calls `enqueue` with their IDs in chunks of at most 1,000, seals
 * with `expectedItems: count`, and returns the sealed batch (`complete` already if the workers were
 * faster than the seal).
 * - With `parentItem` whose item already has a child, opened by an earlier run of the same job that
 *   died (or failed) before its job completed, the rerun takes that child over. Sealed (or complete)
 *   with `count` items, it is returned and nothing is enqueued: the rerun hands the item to it again
 *   (`handedToChild`). Still open with at most `count` items (the run died, or its adds, enqueue or
 *   seal failed, before the seal), it is finished: the adds are made again with the same
 *   Idempotency-Keys, so those the earlier run committed add nothing and give back their groups,
 *   every ID is enqueued (those the earlier run enqueued run twice; their second acks are
 *   duplicates), and it is sealed. The child is looked up by its item (`list({ parentItem })`; on a
 *   service older than that look-up, among the parent's children; the token needs `read`). Any
 *   other child is not taken over (the open's `409 item_not_pending` is thrown): cancelled, sealed
 *   with another total, open with another userKey or callbackUrl, with more than `count` items or a
 *   total this call's adds do not reach on the way, or whose item is no longer pending. An open
 *   child holding items under keys not the producer's fails with `add_failed` (docs/integrations.md).
 * - IDs are made as they are enqueued: a batch of millions never sits in memory as strings.
 * - Every add carries an Idempotency-Key and is retried on network errors, `408`, `429` and `5xx`: a retry whose
 *   first try was committed makes nothing twice.
 * - When an add, `enqueue` or the seal fails once the batch is open, the batch is not sealed, so it
 *   cannot complete: the error (`RollcallIntegrationError`, code `add_failed`, `enqueue_failed` or
 *   `seal_failed`, with `batchId` and the failure as `cause`) lets the caller cancel or delete it,
 *   or, after `seal_failed` only, seal it again (every item is queued then). Never seal after
 *   `add_failed` or `enqueue_failed`: an add whose answers were all lost may have been committed,
 *   and items no job carries would keep the sealed batch pending for good. Left alone, the service
 *   sweeps it after `OPEN_BATCH_TTL`.
 */
export async function openBatch(client: RollcallClient, input: OpenBatchInput): Promise<Batch> {
  const { count, enqueue } = input;
  if (!Number.isSafeInteger(count) || count < 0) throw new RangeError(`count must be a whole number ≥ 0, not ${count}`);
  // Before the open: a JavaScript caller's mistake would otherwise leave an unsealed batch behind.
  if (typeof enqueue !== 'function') throw new TypeError(`enqueue must be a function, not ${typeof enqueue}`);
  const opened = await openOrTakeOver(client, input);
  if (opened.state !== 'open') return opened; // an earlier run's child, sealed: nothing to enqueue again
  const batch = opened;
  const progress = { enqueued: 0 };
  /** Runs one step on the open batch; its failure names the batch (or the caller could not reach it again) and how far enqueue got. */
  const step = async <T>(code: IntegrationErrorCode, what: string, work: () => Promise<T>): Promise<T> => {
    try {
      return await work();
    } catch (error) {
      // A seal whose every answer was lost may have been committed: say so, not "not sealed".
      const state = code === 'seal_failed' ? 'may not be sealed (sealing it again changes nothing if it was)' : 'is not sealed';
      throw new RollcallIntegrationError(code, `${what} failed; batch ${batch.id} ${state}`, {
        cause: error,
        batchId: batch.id,
        enqueued: progress.enqueued,
      });
    }
  };
  for (let add = 0, total = 0; total < count; add++) {
    const size = Math.min(count - total, MAX_ITEMS_PER_ADD);
    total += size;
    const added = await step('add_failed', 'adding items', async () => {
      const answer = await withRetries(() => client.addItems(batch.id, size, { idempotencyKey: addKey(add) }));
      if (answer.total !== total) throw new RangeError(`the batch holds ${answer.total - total} items that no run of this producer added`);
      return answer;
    });
    await step('enqueue_failed', 'enqueue', () => enqueueInChunks(added.itemIds(), enqueue, progress));
  }
  return step('seal_failed', 'the seal', () => withRetries(() => client.seal(batch.id, { expectedItems: count })));
}

/**
 * The Idempotency-Key of a batch's `add`th add (they are scoped to the batch): the same for every
 * run, so a rerun that finishes an earlier run's child replays the adds that run committed (the
 * same groups come back) and makes only those it did not.
 */
const addKey = (add: number): string => `rollcall-producer-add-${add}`;

/**
 * Opens the batch; or, with `parentItem` whose item an earlier run of the same job already gave a
 * child, that child: sealed with `count` items, it is returned as it is; still open with no more
 * items than `count` (the run died, or its seal failed, before it was sealed), it is finished
 * here. Any other child is not taken over: the open's refusal is thrown.
 */
async function openOrTakeOver(client: RollcallClient, input: OpenBatchInput): Promise<Batch> {
  const { count, userKey, metadata, callbackUrl, parentItem } = input;
  try {
    // Only the open's own fields: an input object that also carries the caller's other settings (a
    // queue name, say) would be refused by the service's strict body schema.
    return await withRetries(() => client.open({ userKey, metadata, callbackUrl, parentItem }), DEFAULT_RETRY, {
      retryable: refusedUntried,
      until: performance.now() + OPEN_WAITS_MS,
    });
  } catch (error) {
    const earlier = parentItem !== undefined && isItemTaken(error) ? await childStandingFor(client, parentItem).catch(() => undefined) : undefined;
    if (earlier && (earlier.state === 'sealed' || earlier.state === 'complete') && earlier.total === count) return earlier;
    if (earlier?.state === 'open' && (await mayFinish(client, earlier, input).catch(() => false))) return earlier;
    throw error; // the open's own refusal, also when a look-up failed (its token may lack `read`)
  }
}

/**
 * Whether an open child looks like an earlier run's of this same call, left before its seal: the
 * same userKey and callbackUrl, a total that this call's adds reach on the way (0, whole adds, or
 * `count`), and its item still pending. Finishing it adds items to it when the earlier run's adds
 * did not all commit, and enqueues `count` jobs: not for another caller's child (its items are not
 * ours, and an add under a key it never used would be made anew), nor for an item that failed
 * meanwhile (its last attempt gave up on the child: a manual retry would run the jobs for nothing).
 */
async function mayFinish(client: RollcallClient, child: Batch, input: OpenBatchInput): Promise<boolean> {
  const { count, userKey, callbackUrl, parentItem } = input;
  if (child.userKey !== (userKey ?? null) || child.callbackUrl !== (callbackUrl ?? null)) return false;
  if (child.total > count || (child.total !== count && child.total % MAX_ITEMS_PER_ADD !== 0)) return false;
  return (await withRetries(() => client.item(parentItem as string))).state === 'pending';
}

/**
 * rollcall's own refusals of an open that made nothing (its rate limit and its quota answer before any
 * write), so an open refused with one can be sent again, though an open has no idempotency key. Any
 * other failure may hide a batch that was made: a 503, a lost answer, or a 429 of a proxy that may
 * have retried the open on another replica after the first committed it.
 */
const refusedUntried = (error: unknown): boolean =>
  error instanceof RollcallApiError && error.status === 429 && (error.code === 'rate_limited' || error.code === 'quota_exceeded');

const isItemTaken = (error: unknown): boolean => error instanceof RollcallApiError && error.status === 409 && error.code === 'item_not_pending';

/**
 * The child batch standing for `parentItem`, if any: one look-up by the item (the token needs
 * `read`). A service older than that look-up refuses it (`400`): there the parent's children are
 * paged through instead.
 */
async function childStandingFor(client: RollcallClient, parentItem: string): Promise<Batch | undefined> {
  const item = parentItem.toLowerCase();
  try {
    const page = await withRetries(() => client.list({ parentItem, limit: 1 }));
    return page.batches.find((batch) => batch.parentItem === item);
  } catch (error) {
    if (!(error instanceof RollcallApiError && error.status === 400)) throw error;
  }
  const parent = item.slice(0, item.indexOf(':'));
  let cursor: string | undefined;
  do {
    const page = await withRetries(() => client.list({ parent, limit: 500, ...(cursor === undefined ? {} : { cursor }) }));
    const found = page.batches.find((batch) => batch.parentItem === item);
    if (found) return found;
    cursor = page.nextCursor ?? undefined;
  } while (cursor !== undefined);
  return undefined;
}

/** How long an open waits out rollcall's refusals at most before it throws the last. */
const OPEN_WAITS_MS = 60_000;

/**
 * Hands every ID to `enqueue`, a chunk at a time, counting those it took. Whether a chunk was the
 * last is the iterator's to say, never the chunk's length after the call: a callback that empties
 * its array (sending it on in tens, say) made the rest of the batch go unqueued, sealed all the same.
 */
async function enqueueInChunks(ids: Iterator<string>, enqueue: OpenBatchInput['enqueue'], progress: { enqueued: number }): Promise<void> {
  for (let next = ids.next(); !next.done;) {
    const chunk: string[] = [];
    for (; !next.done && chunk.length < MAX_ENQUEUE_CHUNK; next = ids.next()) chunk.push(next.value);
    const size = chunk.length;
    await enqueue(chunk);
    progress.enqueued += size;
  }
}
