import { AckCall, callSize } from '../domain/ackCall';
import { CommitUnconfirmedError, LockHeldError, UnavailableError } from '../domain/errors';
import { batchesHeldElsewhere } from '../store/batches';
import { ackItems, AckResult } from './ackItems';
import { ServiceDeps } from './deps';

export interface AckMergeOptions {
  /** How long the first call of a round waits for others to join it. */
  windowMs: number;
  /**
   * Whether a call waits for the window even when no round runs. Needed where a running round keeps
   * the process from reading requests (SQLite, in-process): calls can then meet only within the
   * window. Otherwise such a call starts its round at once and later calls gather behind it.
   */
  waitWhenIdle: boolean;
  /** A round is closed early once it holds this many IDs. */
  maxIds: number;
  /** Merged transactions (rounds) in flight at once; no two of them touch the same batch. */
  concurrency: number;
  /** IDs that may wait in this process at once; a call past it is answered 503 at once. */
  maxQueuedIds: number;
  /** Of those, what one tenant's calls may hold, so that one tenant cannot fill the queue for all. */
  maxQueuedIdsPerTenant: number;
  /**
   * Marks the targets of a call that are not its caller's before it queues (BatchOwners.screen): a
   * promise while it reads, counted against the limits above meanwhile.
   */
  screen?: (call: AckCall) => Promise<void> | null;
}

interface Waiting {
  call: AckCall;
  size: number;
  batchIds: string[];
  resolve: (result: AckResult) => void;
  reject: (error: unknown) => void;
  /** Run again once after its round waited for another batch's lock: a second such wait is its 503. */
  again?: true;
}

/** The batches whose rows the call's round reads and locks (not those known to be others'). */
const batchIdsOf = (call: AckCall): string[] => [...new Set(call.targets.filter((t) => !t.foreign).map((t) => t.batchId))];

/** How long a batch found held by another connection keeps its calls out of other batches' rounds. */
const HELD_MEMORY_MS = 60_000;

/** The longest the question "which batch is held?" may take; past it, no batch is named. */
const HELD_QUESTION_LIMIT_MS = 500;

/** The batches another connection holds, or none when the database does not tell within the limit. */
function heldOf(deps: ServiceDeps, batchIds: string[]): Promise<string[]> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<string[]>((resolve) => (timer = setTimeout(() => resolve([]), HELD_QUESTION_LIMIT_MS)));
  const asked = batchesHeldElsewhere(deps.db, batchIds, performance.now() + HELD_QUESTION_LIMIT_MS).catch(() => []);
  return Promise.race([asked, late]).finally(() => clearTimeout(timer));
}

/**
 * The 503 a call gets for a lock wait, naming those of `heldIds` the call names (a client sends its
 * acks of the other batches again apart; one held batch then delays only its own). The round's error
 * as it is when the call names none (it ran again once, and waited behind the held batch).
 */
function heldNamedBy(call: Waiting, heldIds: readonly string[], error: LockHeldError): LockHeldError {
  const named = heldIds.filter((id) => call.batchIds.includes(id));
  return named.length === 0 ? error : new LockHeldError({ cause: error, heldBatchIds: named });
}

/**
 * Group commit for acks: calls that arrive while transactions are running, or within `windowMs`
 * of each other, are merged into one transaction (a round). Each caller gets its own result, and
 * only after the commit. If the transaction fails because the database is busy or away, every
 * merged caller gets that error (503); if it fails for another reason, each call runs again alone.
 *
 * Up to `concurrency` rounds run at once, and a batch is in at most one of them: a call waits while
 * a round in flight holds one of its batches, and so does every later call of that batch (each
 * batch keeps its order). A batch whose row another connection holds therefore stalls only its
 * own calls (up to LOCK_TIMEOUT), while rounds of other batches keep committing.
 *
 * A round that waited in vain for a lock tells which of its batches are held; from then on (until
 * one of their rounds commits, or for HELD_MEMORY_MS) calls that name them go in rounds without
 * calls of other batches, one such round at a time, so the next wait for them holds up no call of
 * another batch and takes one slot. The calls of the failed round that name no held batch run
 * again instead of sharing its 503.
 */
export class AckCommitter {
  /** Rounds run and calls answered through them (calls / transactions = merge factor). */
  readonly stats = { transactions: 0, calls: 0, ids: 0 };
  private queue: Waiting[] = [];
  private queuedIds = 0;
  private readonly queuedByTenant = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private readonly inFlight = new Set<Promise<void>>();
  /** Calls being screened before they queue (their IDs already count as waiting), and their IDs. */
  private readonly screening = new Set<Promise<void>>();
  private screeningIds = 0;
  /** Batches that a round in flight touches. */
  private readonly busy = new Set<string>();
  /** Batches found held by another connection, with when that finding is forgotten. */
  private readonly held = new Map<string, number>();
  /** Whether a round of calls that name a held batch is in flight (one at a time). */
  private heldRoundInFlight = false;

  constructor(
    private readonly deps: ServiceDeps,
    private readonly options: AckMergeOptions,
    private readonly onRound?: (calls: number, ids: number) => void,
  ) {}

  /** Acked IDs waiting for a round (what ACK_QUEUE_MAX_IDS bounds). */
  get waitingIds(): number {
    return this.queuedIds;
  }

  submit(call: AckCall): Promise<AckResult> {
    const size = callSize(call);
    if (this.queuedIds > 0 && this.queuedIds + size > this.options.maxQueuedIds) {
      return Promise.reject(new UnavailableError(`more than ${this.options.maxQueuedIds} acked IDs are waiting for the database in this process; try again`));
    }
    const tenantWaiting = this.queuedByTenant.get(call.tenant) ?? 0;
    if (tenantWaiting > 0 && tenantWaiting + size > this.options.maxQueuedIdsPerTenant) {
      return Promise.reject(
        new UnavailableError(
          `more than ${this.options.maxQueuedIdsPerTenant} acked IDs of this tenant are waiting for the database in this process; try again`,
        ),
      );
    }
    return new Promise<AckResult>((resolve, reject) => {
      this.queuedIds += size;
      this.queuedByTenant.set(call.tenant, tenantWaiting + size);
      const entry: Waiting = { call, size, batchIds: [], resolve, reject };
      const screening = this.options.screen?.(call);
      if (!screening) return this.enqueue(entry);
      this.screeningIds += size;
      const screened: Promise<void> = screening
        .then(
          () => {
            this.screeningIds -= size;
            this.enqueue(entry);
          },
          (error: unknown) => {
            this.screeningIds -= size;
            this.leavesQueue(entry);
            this.queuedIds -= size;
            reject(error);
          },
        )
        .finally(() => this.screening.delete(screened));
      this.screening.add(screened);
    });
  }

  private enqueue(entry: Waiting): void {
    entry.batchIds = batchIdsOf(entry.call);
    this.queue.push(entry);
    this.schedule();
  }

  /** Resolves once every submitted call has been answered. */
  async drain(): Promise<void> {
    while (this.inFlight.size > 0 || this.queue.length > 0 || this.screening.size > 0) {
      if (this.inFlight.size === 0) this.flush();
      await Promise.race([...this.inFlight, ...this.screening]);
    }
  }

  private schedule(): void {
    if (this.inFlight.size >= this.options.concurrency) return; // a finishing round starts the next one
    // With no round running there is nothing to gather behind: waiting the window would only add
    // its length to the call's answer (a lone caller, such as a client that merges its own acks,
    // waited ~2.5 ms of a ~5 ms call). Calls that arrive while this round runs gather for the next.
    const idle = this.inFlight.size === 0 && !this.options.waitWhenIdle;
    if (idle || this.queuedIds - this.screeningIds >= this.options.maxIds || this.options.windowMs === 0) {
      this.flush();
    } else if (!this.timer) {
      this.timer = setTimeout(() => this.flush(), this.options.windowMs);
    }
  }

  /**
   * The next round, in arrival order: calls none of whose batches is busy, up to maxIds. A call left
   * waiting reserves its batches, so no later call of those batches overtakes it. Calls that name a
   * held batch share a round only with each other, and only while no other such round is in flight.
   * Calls running again (their batches found free after a round waited for another's lock) share a
   * round only with each other too: merged with a call of a batch not yet known to be held, they
   * would wait for it as well, and a second such wait is their 503.
   */
  private takeRound(): { round: Waiting[]; ofHeld: boolean } {
    const round: Waiting[] = [];
    const waiting: Waiting[] = [];
    const reserved = new Set<string>();
    let ofHeld = false;
    let ids = 0;
    for (const entry of this.queue) {
      const free = entry.batchIds.every((id) => !this.busy.has(id) && !reserved.has(id));
      const namesHeld = this.namesHeld(entry);
      const fits =
        round.length === 0
          ? !(namesHeld && this.heldRoundInFlight)
          : ids + entry.size <= this.options.maxIds && namesHeld === ofHeld && Boolean(entry.again) === Boolean(round[0]?.again);
      if (free && fits) {
        if (round.length === 0) ofHeld = namesHeld;
        round.push(entry);
        ids += entry.size;
        this.leavesQueue(entry);
      } else {
        waiting.push(entry);
        for (const id of entry.batchIds) reserved.add(id);
      }
    }
    this.queue = waiting;
    this.queuedIds -= ids;
    return { round, ofHeld };
  }

  private namesHeld(entry: Waiting): boolean {
    return this.held.size > 0 && entry.batchIds.some((id) => this.isHeld(id));
  }

  private isHeld(batchId: string): boolean {
    return (this.held.get(batchId) ?? 0) > performance.now();
  }

  private markHeld(batchIds: string[]): void {
    const now = performance.now();
    for (const [id, until] of this.held) if (until <= now) this.held.delete(id);
    for (const id of batchIds) this.held.set(id, now + HELD_MEMORY_MS);
  }

  private leavesQueue(entry: Waiting): void {
    const left = (this.queuedByTenant.get(entry.call.tenant) ?? 0) - entry.size;
    if (left > 0) this.queuedByTenant.set(entry.call.tenant, left);
    else this.queuedByTenant.delete(entry.call.tenant);
  }

  /**
   * After a round of one batch waited LOCK_TIMEOUT in vain for that batch's lock, the calls of that
   * batch queued behind it get the same 503 now: each would wait for the same lock in a round of its
   * own, one LOCK_TIMEOUT after another (ten calls of a locked batch were answered after 2, 4, …,
   * 12 s).
   */
  private failQueuedBehind(batchId: string, error: LockHeldError): void {
    const kept: Waiting[] = [];
    for (const entry of this.queue) {
      if (!entry.batchIds.includes(batchId)) {
        kept.push(entry);
        continue;
      }
      this.leavesQueue(entry);
      this.queuedIds -= entry.size;
      entry.reject(new LockHeldError({ cause: error, heldBatchIds: [batchId] }));
    }
    this.queue = kept;
  }

  /**
   * A round waited LOCK_TIMEOUT in vain. With one batch, that batch is held: the round's calls and
   * those queued behind it get the 503. With several, the database is asked which are held (without
   * waiting): the round's calls that name one get the 503, the others go back to the head of the
   * queue and run again (once), and its batches found free are no longer taken for held. Queued calls
   * keep their place (a batch another replica held only for a moment may be named), except those of
   * a batch found held a second time in a row: that one is stuck, as with one batch. When no batch
   * can be named (the lock was released meanwhile, or was on another table, or the answer took too
   * long), every call of the round gets the 503, as before.
   */
  private async lockWaitFailed(whole: Waiting[], batchIds: string[], error: LockHeldError): Promise<void> {
    // A call that names no batch row (its IDs malformed, or in other tenants' batches) waited for no
    // lock of its own: it runs again, once, instead of sharing the 503 of a batch it never named.
    const round = whole.filter((w) => w.batchIds.length > 0 || w.again);
    this.requeue(whole.filter((w) => !round.includes(w)).map((w) => ({ ...w, again: true })));
    const distinct = [...new Set(batchIds)];
    if (distinct.length === 1) {
      this.markHeld(distinct);
      round.forEach((w) => w.reject(heldNamedBy(w, distinct, error)));
      return this.failQueuedBehind(distinct[0] as string, error);
    }
    const heldIds = await heldOf(this.deps, distinct);
    if (heldIds.length === 0) return round.forEach((w) => w.reject(error));
    const stuck = heldIds.filter((id) => this.isHeld(id));
    for (const id of distinct) this.held.delete(id);
    this.markHeld(heldIds);
    const again: Waiting[] = [];
    for (const w of round) {
      if (w.again || w.batchIds.some((id) => heldIds.includes(id))) w.reject(heldNamedBy(w, heldIds, error));
      else again.push({ ...w, again: true });
    }
    for (const id of stuck) this.failQueuedBehind(id, error);
    this.requeue(again);
  }

  /** Puts calls back at the head of the queue, in their order. */
  private requeue(entries: Waiting[]): void {
    for (const entry of entries) {
      this.queuedIds += entry.size;
      this.queuedByTenant.set(entry.call.tenant, (this.queuedByTenant.get(entry.call.tenant) ?? 0) + entry.size);
    }
    this.queue = [...entries, ...this.queue];
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    while (this.inFlight.size < this.options.concurrency && this.queue.length > 0) {
      const { round, ofHeld } = this.takeRound();
      if (round.length === 0) return; // every waiting call needs a busy batch (or the held round's turn)
      this.run(round, ofHeld);
    }
  }

  /**
   * After a merged transaction failed for a reason other than the database being busy or away (that
   * one would fail each call alike: they get the 503 to retry), each call runs alone, in order, so
   * only a call that cannot commit by itself gets the error. What one batch holds must not fail the
   * acks of others (a callback host too long for its column once did). Also after a COMMIT that
   * failed without saying why: on Citus that is one worker lost, whose batches others need not share
   * (a call whose acks did commit finds them duplicates). Once a call alone meets a database that is
   * away, or two in a row meet unconfirmed commits, the rest get that error at once: a database that
   * fails every commit must not cost each round a transaction per call. A call of one batch that
   * waited LOCK_TIMEOUT in vain names that batch held: the round's later calls of it, and those
   * queued behind, get the 503 at once (each waited a LOCK_TIMEOUT more, and every batch of the round
   * with it). Each batch no later call of the round names is let go as soon as its calls are
   * answered, so new calls of it need not wait for the rest of the round.
   */
  private async eachAlone(round: Waiting[], owned: Set<string>): Promise<void> {
    let unconfirmedInARow = 0;
    const answered = new Set<Waiting>();
    for (const [i, w] of round.entries()) {
      if (answered.has(w)) continue;
      this.stats.transactions += 1;
      const error = await ackItems(this.deps, [w.call]).then(
        ([result]) => (w.resolve(result as AckResult), null),
        (caught: unknown) => (w.reject(caught), caught),
      );
      const rest = round.slice(i + 1).filter((later) => !answered.has(later));
      unconfirmedInARow = error instanceof CommitUnconfirmedError ? unconfirmedInARow + 1 : 0;
      if (unconfirmedInARow >= 2 || databaseAway(error)) {
        for (const later of rest) later.reject(error);
        return;
      }
      if (error instanceof LockHeldError && w.batchIds.length === 1) this.heldMeanwhile(w.batchIds[0]!, error, rest, answered);
      this.letGo(owned, rest, answered);
    }
  }

  /** Batch `batchId` was found held by a call run alone: its later calls, in the round and queued, get the 503. */
  private heldMeanwhile(batchId: string, error: LockHeldError, rest: Waiting[], answered: Set<Waiting>): void {
    this.markHeld([batchId]);
    for (const later of rest) {
      if (!later.batchIds.includes(batchId)) continue;
      answered.add(later);
      later.reject(new LockHeldError({ cause: error, heldBatchIds: [batchId] }));
    }
    this.failQueuedBehind(batchId, error);
  }

  /**
   * Lets go of the round's batches that no call still to run names (an answered call's, and those
   * of calls answered for a held batch), and starts what waited for them.
   */
  private letGo(owned: Set<string>, rest: Waiting[], answered: Set<Waiting>): void {
    const stillNamed = new Set(rest.filter((later) => !answered.has(later)).flatMap((later) => later.batchIds));
    let freed = false;
    for (const id of owned) {
      if (stillNamed.has(id)) continue;
      owned.delete(id);
      this.busy.delete(id);
      freed = true;
    }
    if (!freed || this.queue.length === 0) return;
    try {
      this.flush();
    } catch (error) {
      // The rest of this round must still be answered: what failed to start is started by the next flush.
      this.deps.log.error({ err: error }, 'starting the calls that waited for a batch let go failed');
    }
  }

  private run(round: Waiting[], ofHeld = false): void {
    const batchIds = round.flatMap((w) => w.batchIds);
    for (const id of batchIds) this.busy.add(id);
    // The batches this round holds busy until it ends, less those eachAlone lets go of earlier.
    const owned = new Set(batchIds);
    if (ofHeld) this.heldRoundInFlight = true;
    const ids = round.reduce((n, w) => n + w.size, 0);
    this.stats.transactions += 1;
    this.stats.calls += round.length;
    this.stats.ids += ids;
    this.onRound?.(round.length, ids);
    const running: Promise<void> = ackItems(
      this.deps,
      round.map((w) => w.call),
    )
      .then(
        (results) => {
          round.forEach((w, i) => w.resolve(results[i] as AckResult));
          if (this.held.size > 0) for (const id of batchIds) this.held.delete(id);
        },
        (error: unknown) => {
          if (round.length > 1 && runsAgainAlone(error)) {
            this.deps.log.warn({ err: error, calls: round.length }, 'a merged ack transaction failed; its calls run again one by one');
            return this.eachAlone(round, owned);
          }
          if (error instanceof LockHeldError) return this.lockWaitFailed(round, batchIds, error);
          round.forEach((w) => w.reject(error));
        },
      )
      .finally(() => {
        this.inFlight.delete(running);
        for (const id of owned) this.busy.delete(id);
        if (ofHeld) this.heldRoundInFlight = false;
        // Calls that queued meanwhile have waited a whole transaction already: run them now.
        if (this.queue.length > 0) this.flush();
      });
    this.inFlight.add(running);
  }
}

/** Whether the calls of a merged round that failed with `error` run again one by one. */
const runsAgainAlone = (error: unknown): boolean => !(error instanceof UnavailableError) || error instanceof CommitUnconfirmedError;

/** An error that says the database itself is away: not a lock held elsewhere, nor one commit unconfirmed. */
const databaseAway = (error: unknown): boolean =>
  error instanceof UnavailableError && !(error instanceof CommitUnconfirmedError) && !(error instanceof LockHeldError);
