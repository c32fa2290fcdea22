import { RollcallClient } from '../client';

export interface CancelCheckOptions {
  /**
   * How long what was learned about a batch that is not cancelled is trusted before it is asked
   * again (`GET /v1/items/:itemId`, one call per batch and interval per process). The jobs of a batch
   * the process has not asked about yet, or not for a whole interval, wait for the answer; while the
   * batch's jobs keep coming, the look-up runs behind them and they go on with what was last
   * learned. `0` never asks: cancel is then learned only from a `batch_cancelled` rejection of an
   * ack. Default 1000 ms.
   */
  cancelCheckIntervalMs?: number;
}

interface Known {
  cancelled: boolean;
  checkedAt: number;
  /** The look-up out now, if any. */
  asking: Promise<boolean> | null;
  /** Whether a look-up has answered: until one has, jobs wait for it. */
  answered: boolean;
  /**
   * Whether the jobs that come now wait for the look-up out: those of the turn in which the first
   * look-up, or one after a quiet spell, was sent, so that the jobs let go together with the one
   * that found the spell (held messages) wait for its answer too. Later jobs go on as a steady
   * stream does: a slow look-up must not hold every job of a batch.
   */
  awaited: boolean;
  /** When a job last asked about the batch: a job after a quiet spell waits for a fresh answer. */
  seenAt: number;
}

/** How long "not cancelled" is trusted by default. */
const DEFAULT_INTERVAL_MS = 1000;

/**
 * `options.cancelCheckIntervalMs`, checked: NaN (`Number` of an unset variable) made every job ask
 * again, one look-up a job.
 */
function intervalOf(options: CancelCheckOptions): number {
  const intervalMs = options.cancelCheckIntervalMs ?? DEFAULT_INTERVAL_MS;
  if (!(typeof intervalMs === 'number' && intervalMs >= 0))
    throw new RangeError(`cancelCheckIntervalMs must be a number of milliseconds ≥ 0 (or Infinity), not ${String(intervalMs)}`);
  return intervalMs;
}

/** Batches remembered per process; the oldest are forgotten past this (a re-check costs one call). */
const REMEMBERED_BATCHES = 10_000;

/** The batch ID of an item ID (`<batchId>:<groupId>:<index>`). */
export function batchIdOf(itemId: string): string {
  const colon = itemId.indexOf(':');
  return colon < 0 ? itemId : itemId.slice(0, colon);
}

/**
 * Which batches are cancelled, as far as this process knows, so their jobs are not run. Learned two
 * ways that cost little: an ack rejected as `batch_cancelled` (free, it comes with the answer), and
 * at most one item look-up per batch and interval. A look-up that fails counts as "not cancelled":
 * cancel saves work, it is not needed for correct counts (the service rejects the acks anyway).
 */
export class CancelledBatches {
  private readonly known = new Map<string, Known>();
  private readonly intervalMs: number;

  constructor(
    private readonly client: RollcallClient,
    options: CancelCheckOptions = {},
  ) {
    this.intervalMs = intervalOf(options);
  }

  /** Whether the process knows the item's batch is cancelled, asking nothing and changing nothing. */
  knownCancelled(itemId: string): boolean {
    return this.known.get(batchIdOf(itemId))?.cancelled === true;
  }

  /** Remembers that the batch of this item is cancelled (from a `batch_cancelled` rejection). */
  learnCancelled(itemId: string): void {
    const now = performance.now();
    this.remember(batchIdOf(itemId), { cancelled: true, checkedAt: now, seenAt: now, asking: null, answered: true, awaited: false });
  }

  /**
   * Whether the batch of this item is cancelled: a boolean once the batch has been asked about (most
   * jobs: no promise, no wait), else a promise of the answer, asking rollcall once for all who wait.
   * A stale answer is asked again behind a steady stream of the batch's jobs: a look-up under load
   * takes milliseconds, and every job that started meanwhile would hold its slot for it, once per
   * interval. A job that comes after a quiet spell (none of the batch's jobs for an interval: a
   * retry after its backoff, a trickle) waits for a fresh answer, as the batch's first jobs do.
   */
  isCancelled(itemId: string): boolean | Promise<boolean> {
    const batchId = batchIdOf(itemId);
    const known = this.known.get(batchId);
    if (known?.cancelled) return true;
    if (this.intervalMs <= 0) return false;
    if (!known) return this.ask(batchId, itemId);
    const now = performance.now();
    const quiet = now - known.seenAt >= this.intervalMs;
    known.seenAt = now;
    if (known.asking) return known.answered && !quiet && !known.awaited ? false : known.asking;
    if (now - known.checkedAt < this.intervalMs) return false;
    const asking = this.ask(batchId, itemId, known, quiet);
    return quiet ? asking : false;
  }

  /** Asks rollcall about the batch (again, for `known`); resolves with whether it is cancelled, never rejects. */
  private async ask(batchId: string, itemId: string, known?: Known, awaited = true): Promise<boolean> {
    // Any failure of the look-up, a thrown one too, counts as "not cancelled" (see above).
    const asking = Promise.resolve()
      .then(() => this.client.item(itemId))
      .then((item) => item.batchState === 'cancelled')
      .catch(() => false);
    const now = performance.now();
    const entry: Known = known ?? { cancelled: false, checkedAt: now, seenAt: now, asking: null, answered: false, awaited };
    entry.asking = asking;
    entry.awaited = awaited;
    if (awaited) setImmediate(() => (entry.awaited = false));
    this.remember(batchId, entry);
    const cancelled = await asking;
    entry.asking = null;
    entry.awaited = false;
    entry.answered = true;
    entry.cancelled ||= cancelled;
    entry.checkedAt = performance.now();
    // A cancel learned from a rejected ack while this look-up ran replaced the entry: it holds too.
    return entry.cancelled || this.known.get(batchId)?.cancelled === true;
  }

  private remember(batchId: string, entry: Known): void {
    this.known.delete(batchId); // re-inserted last: Map order is then "least recently learned first"
    this.known.set(batchId, entry);
    if (this.known.size > REMEMBERED_BATCHES) this.known.delete(this.known.keys().next().value as string);
  }
}

/** The cancel knowledge of each client, by check interval: processors and consumers of one process share it. */
const SHARED = new WeakMap<RollcallClient, Map<number, CancelledBatches>>();

/**
 * The process's CancelledBatches for this client and interval, made on first use: every
 * `rollcallProcessor` and `rollcallConsumer` of one client asks through it, so a batch is looked up
 * once per interval per process (as documented), and a cancel one of them learns from a rejected
 * ack spares the others' jobs too.
 */
export function sharedCancelledBatches(client: RollcallClient, options: CancelCheckOptions = {}): CancelledBatches {
  const intervalMs = intervalOf(options);
  let byInterval = SHARED.get(client);
  if (!byInterval) SHARED.set(client, (byInterval = new Map()));
  let batches = byInterval.get(intervalMs);
  if (!batches) byInterval.set(intervalMs, (batches = new CancelledBatches(client, { cancelCheckIntervalMs: intervalMs })));
  return batches;
}
