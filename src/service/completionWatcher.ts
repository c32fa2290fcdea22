import { toBatchView } from '../contract/batchView';
import { BatchView } from '../contract/responses';
import { BatchRecord, Caller, isFinished } from '../domain/batch';
import { TooManyWaitsError } from '../domain/errors';
import { isUuid } from '../domain/itemId';
import { findFinishedOrGone } from '../store/batches';
import { ServiceDeps } from './deps';
import { getBatch } from './readBatches';

/** How long a poll may run before the next tick polls beside it. */
const POLL_OVERDUE_MS = 5_000;
/** At most one warning of failing polls in this long. */
const POLL_FAILURE_SAID_EVERY_MS = 60_000;

/** Wakes a waiter: with the batch that ended, or with nothing (it reads the state itself: timed out, released, or gone). */
type Wake = (batch: BatchRecord | null) => void;

/** Long-polls one process holds at once: in all, and of one tenant (WAIT_MAX). */
export interface WaitLimits {
  total: number;
  perTenant: number;
}

/** How long a read of a batch for waits that ended unanswered serves the others ending then (readAgain). */
const REREAD_SHARED_MS = 25;

/**
 * Long-poll for completion (or cancellation: both end a batch). Waiters of this process are woken at once by completions made here,
 * and by ONE shared query every `pollIntervalMs` that asks which of all waited-for batches are
 * finished (for completions made by other replicas): hundreds of waiters cost one query per tick.
 * The same query finds batches deleted meanwhile: their waiters are answered 404 then, not at their timeout.
 */
export class CompletionWatcher {
  private readonly waiters = new Map<string, Set<Wake>>();
  private timer: NodeJS.Timeout | null = null;
  /**
   * When the poll still running started: a tick then is skipped, so a slow database never has polls
   * pile up on the pool; but not past POLL_OVERDUE_MS, so one poll stuck on a dead connection (up to
   * DB_QUERY_TIMEOUT, or for good without one) does not stop the others' completions reaching waiters.
   */
  private pollStartedAt: number | null = null;
  /** When a failed poll was last logged (performance.now()). */
  private pollFailureSaidAt = -Infinity;
  /** Long-polls held now (from before their first read to their answer), in all and by tenant. */
  private held = 0;
  private readonly heldByTenant = new Map<string, number>();
  /** Set by release() (shutdown): from then on a wait answers with the state it reads, holding nothing. */
  private released = false;
  /** Reads of a batch for waits that ended unanswered, shared by those of the same moment (readAgain). */
  private readonly rereads = new Map<string, { startedAt: number; read: Promise<BatchView> }>();
  /** Waits past their first read that have not yet been woken, timed out or abandoned (`waiting`). */
  private sleeping = 0;

  constructor(
    private readonly deps: ServiceDeps,
    private readonly pollIntervalMs: number,
    private readonly limits: WaitLimits = { total: Infinity, perTenant: Infinity },
  ) {}

  /** Waits past their first read, waiting to be woken. */
  get waiting(): number {
    return this.sleeping;
  }

  /** Long-polls this process holds now (what WAIT_MAX bounds). */
  get holding(): number {
    return this.held;
  }

  /** Completions and cancellations committed in this process. */
  notify(batches: BatchRecord[]): void {
    for (const batch of batches) this.wakeAll(batch.id, batch);
    this.stopPollingIfIdle();
  }

  private wakeAll(batchId: string, batch: BatchRecord | null): void {
    const set = this.waiters.get(batchId);
    if (!set) return;
    this.waiters.delete(batchId);
    for (const wake of set) wake(batch);
  }

  /**
   * Answers as soon as the batch is complete or cancelled, or after `timeoutMs` with its state then.
   * A wait that would hold more than the limits is refused before it reads anything: each one holds a
   * connection, timers and a place in every poll for up to a minute, so one tenant's thousands must
   * not take a replica's memory and polls from the others. A timeout of 0 holds nothing.
   */
  async wait(caller: Caller, batchId: string, timeoutMs: number, abandoned: AbortSignal): Promise<BatchView> {
    if (timeoutMs === 0) return getBatch(this.deps, caller, batchId);
    const release = this.hold(caller.tenant);
    try {
      return await this.waitHolding(caller, batchId, timeoutMs, abandoned);
    } finally {
      release();
    }
  }

  /** Takes one of the places WaitLimits allows, or throws TooManyWaitsError; returns its release. */
  private hold(tenant: string): () => void {
    const ofTenant = this.heldByTenant.get(tenant) ?? 0;
    if (this.held >= this.limits.total) throw new TooManyWaitsError(`this process holds ${this.limits.total} waits (WAIT_MAX); try again shortly`);
    if (ofTenant >= this.limits.perTenant) {
      throw new TooManyWaitsError(`this tenant holds ${this.limits.perTenant} waits in this process, half of WAIT_MAX; try again shortly`);
    }
    this.held += 1;
    this.heldByTenant.set(tenant, ofTenant + 1);
    return () => {
      this.held -= 1;
      const left = (this.heldByTenant.get(tenant) ?? 1) - 1;
      if (left > 0) this.heldByTenant.set(tenant, left);
      else this.heldByTenant.delete(tenant);
    };
  }

  private async waitHolding(caller: Caller, batchId: string, timeoutMs: number, abandoned: AbortSignal): Promise<BatchView> {
    // Heard from before the first read: a completion committed here while that read ran (it read the
    // batch unfinished) wakes this wait then, not at the next poll. Ids that are not UUIDs are not
    // listened for: the read answers them 404, and the poll's query must not carry them.
    const ending = isUuid(batchId) ? this.listen(batchId.toLowerCase()) : null;
    // The timeout counts from the request, the first read included: a read slowed to DB_QUERY_TIMEOUT
    // held a 60-s wait for 90 s.
    const deadline = performance.now() + timeoutMs;
    try {
      const now = await getBatch(this.deps, caller, batchId);
      const readAt = performance.now();
      // A caller gone during that read is not waited for (its abort has fired: no listener would hear
      // it). Nor is one that came after release(): a shutdown waits for every answer, and a client
      // asking again at once (waitForCompletion) would otherwise be held to its timeout.
      if (isFinished(now.state) || abandoned.aborted || this.released || !ending) return now;
      const left = deadline - performance.now();
      if (left > 0) this.startPolling();
      const completed = await ending.heard(Math.max(0, left), abandoned);
      ending.stop();
      if (completed) return toBatchView(completed);
      // One whose time ran out during that read has its answer: another read as slow would hold it
      // longer still (and, begun after every read again under way, would share none).
      if (left <= 0) return now;
      // A caller gone meanwhile reads nothing more: its place is free at once, and the answer goes nowhere.
      return abandoned.aborted ? now : await this.readAgain(caller, now.id, readAt);
    } finally {
      ending?.stop();
    }
  }

  /**
   * A place among the batch's waiters from now on: `heard` resolves with what wakes it (the batch
   * that ended, or null: read it yourself), at once if that came already, or null after `timeoutMs`
   * or the caller's abort. `stop` leaves the place.
   */
  private listen(batchId: string): { heard(timeoutMs: number, abandoned: AbortSignal): Promise<BatchRecord | null>; stop(): void } {
    const set = this.waiters.get(batchId) ?? new Set<Wake>();
    this.waiters.set(batchId, set);
    let woken: { batch: BatchRecord | null } | null = null;
    let answer: Wake | null = null;
    const wake: Wake = (batch) => {
      woken ??= { batch };
      answer?.(batch);
    };
    set.add(wake);
    const stop = () => {
      if (!set.delete(wake)) return;
      if (set.size === 0 && this.waiters.get(batchId) === set) this.waiters.delete(batchId);
      this.stopPollingIfIdle();
    };
    const heard = (timeoutMs: number, abandoned: AbortSignal) =>
      new Promise<BatchRecord | null>((resolve) => {
        if (woken) return resolve(woken.batch);
        this.sleeping += 1;
        const done = (batch: BatchRecord | null) => {
          if (answer !== done) return;
          answer = null;
          this.sleeping -= 1;
          clearTimeout(timer);
          abandoned.removeEventListener('abort', onAbort);
          resolve(batch);
        };
        const onAbort = () => done(null);
        const timer = setTimeout(() => done(null), timeoutMs);
        abandoned.addEventListener('abort', onAbort);
        answer = done;
      });
    return { heard, stop };
  }

  /**
   * The batch as it is now, for a wait that ended unanswered (its time ran out, the batch was
   * deleted, a shutdown): one read for all the waits of that batch and tenant ending at once. A
   * tenant's 5,000 waits on one batch (its half of WAIT_MAX), all ending together, made 5,000 reads
   * at that moment, and every other request queued behind them for the pool. Shared only by waits
   * whose own first read ended before it began (`readAt`): one begun earlier may show an older state
   * than such a wait had read already, its counts gone back.
   */
  private readAgain(caller: Caller, batchId: string, readAt: number): Promise<BatchView> {
    const key = JSON.stringify([caller.tenant, batchId]);
    const known = this.rereads.get(key);
    if (known && known.startedAt >= readAt) return known.read;
    const shared = { startedAt: performance.now(), read: getBatch(this.deps, caller, batchId) };
    // Kept a moment after it is answered: waits started over a few milliseconds end over as many,
    // and a read that quick (SQLite's) would be over before the next one's time ran out.
    const forget = () => void setTimeout(() => this.rereads.get(key) === shared && this.rereads.delete(key), REREAD_SHARED_MS).unref();
    shared.read.then(forget, forget);
    this.rereads.set(key, shared);
    return shared.read;
  }

  /** Answers every waiter now with the batch's current state, and every wait from now on at once (on shutdown). */
  release(): void {
    this.released = true;
    for (const set of [...this.waiters.values()]) for (const wake of [...set]) wake(null);
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private startPolling(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.poll(), this.pollIntervalMs);
    this.timer.unref();
  }

  private stopPollingIfIdle(): void {
    if (this.waiters.size === 0) this.close();
  }

  private async poll(): Promise<void> {
    const now = performance.now();
    if (this.pollStartedAt !== null && now - this.pollStartedAt < POLL_OVERDUE_MS) return;
    const started = (this.pollStartedAt = now);
    try {
      const ids = [...this.waiters.keys()];
      for (let i = 0; i < ids.length; i += 1000) {
        const { finished, gone } = await findFinishedOrGone(this.deps.db, ids.slice(i, i + 1000));
        for (const id of gone) this.wakeAll(id, null); // reads the batch, finds it gone: 404
        this.notify(finished);
      }
    } catch (error) {
      // Waiters time out and read the state themselves. Said, at most once a minute: while the polls
      // fail, completions made on other replicas reach waiters only at their timeouts.
      if (now - this.pollFailureSaidAt >= POLL_FAILURE_SAID_EVERY_MS) {
        this.pollFailureSaidAt = now;
        this.deps.log.warn(
          { err: error, waiting: this.waiters.size },
          'the wait poll failed; waits learn of completions on other replicas only at their timeouts until it answers',
        );
      }
    } finally {
      if (this.pollStartedAt === started) this.pollStartedAt = null;
    }
  }
}
