import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';

import { BackoffPolicy, heldUntil, PARK_GRAIN_MS, retryDelay, signBody, standardWebhookSignature } from '../domain/delivery';
import { Claimant, heldToFairShare, loadOf, pickFairly, saturated, ShareLimits } from '../domain/fairShare';
import { LogEvery } from '../domain/logEvery';
import { onCitus, Queryable } from '../store/db';
import {
  blockersNextAttempts,
  claimEvents,
  DueEvent,
  dueEvents,
  dueEventsOfKind,
  freeHeldEventsUpFrom,
  HeldEvent,
  markDelivered,
  markFailed,
  MAY_BE_HELD,
  OutboxEvent,
  parentsOf,
  parkEvents,
  releaseClaim,
  Saturated,
  unparkEvents,
} from '../store/outbox';
import { inTransaction } from '../store/transaction';
import { DeliveryResult, ServiceDeps } from './deps';
import { PostCallback } from './postCallback';

export interface DeliveryOptions {
  /** The secret that signs a tenant's callbacks (its own, else CALLBACK_SECRET), if any. */
  secretFor(tenant: string): string | undefined;
  timeoutMs: number;
  backoff: BackoffPolicy;
  /** An event still failing this long after its first attempt is given up (`dead`, kept for operators). */
  maxAgeMs: number;
  /** Events delivered at once by this process. */
  concurrency: number;
  /** Of those, how many one tenant, one receiving host, and one tenant on a host, may hold. */
  share: ShareLimits;
}

/** Due events read per free slot, so saturated tenants' events do not crowd out the others'. */
const CANDIDATES_PER_SLOT = 4;
/** Reads of due events per pass of a claim at most (each leaves out what the picks before it filled). */
const READS_PER_PASS = 3;

/** How much longer than a POST may take an event's claim lasts (the claim itself, the outcome's write). */
const LEASE_BEYOND_TIMEOUT_MS = 5_000;
/** What of the lease is kept from the POST: the time to record its outcome, and clocks a little apart. */
const LEASE_SAFETY_MS = 1_000;
/** How long a shutdown lets deliveries under way end by themselves before it cuts them off. */
const STOP_GRACE_MS = 1_000;
/** An attempt unanswered this long (or half of CALLBACK_TIMEOUT, if less) steps aside from the slots. */
const SLOW_AFTER_MS = 2_000;
/** How many times CALLBACK_CONCURRENCY may be in flight with the attempts that stepped aside. */
const IN_FLIGHT_PER_SLOT = 4;
/** Held events read at a time by parkHeld, and reads per pass at most. */
const HELD_PER_READ = 500;
const HELD_READS_PER_PASS = 10;
/** A tenant's failed attempts are warned of at most once in this (logQuietly). */
const FAILURE_LOG_EVERY_MS = 1_000;

/**
 * An AbortController whose signal any number of POSTs may listen to: each request under way adds a
 * listener, and past Node's default of 10 (CALLBACK_CONCURRENCY is 16) it warned of a leak.
 */
function unlimitedAbortController(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}

/**
 * Delivers completion events from the outbox: claims due events with a lease (so replicas never
 * send one event at the same time), POSTs each, marks it delivered on 2xx, otherwise schedules the
 * next attempt with exponential backoff and jitter. At least once: a crash between the POST and the
 * mark means another attempt, never none; receivers dedupe by X-Rollcall-Event-Id.
 *
 * Slots are refilled as each delivery ends, not in rounds, and shared: one tenant or receiving host
 * holds at most its share of them, so a receiver that never answers slows only its own events.
 */
export class CallbackDispatcher {
  private readonly claim = randomUUID();
  /** Deliveries ended so far (deliverDue reads again when one ended during its claim). */
  private finished = 0;
  private readonly inFlight = new Map<string, { event: OutboxEvent; done: Promise<void> }>();
  /** Of those, the attempts that stepped aside (unanswered for SLOW_AFTER_MS): they hold no slot. */
  private readonly steppedAside = new Set<string>();
  /** Aborted by settle(): cuts off the POSTs still under way at shutdown. */
  private readonly stopping = unlimitedAbortController();
  /** Where parkHeld's next page of each kind starts (null: from the oldest due). */
  private readonly heldFrom = new Map<string, HeldEvent | null>();
  /** Failed attempts' warnings: one a second per tenant and kind (logQuietly). */
  private readonly failuresLogged = new LogEvery(FAILURE_LOG_EVERY_MS);
  /** Called when a delivery ends and its slot is free again (the background loop claims more). */
  onSlotFreed: () => void = () => undefined;

  constructor(
    private readonly deps: ServiceDeps,
    private readonly options: DeliveryOptions,
    private readonly post: PostCallback,
  ) {}

  /**
   * Free slots. An attempt whose POST is unanswered after SLOW_AFTER_MS holds none while it waits:
   * receivers that hang, of several tenants or hosts, each within its share, filled every slot
   * until their attempts timed out (CALLBACK_TIMEOUT), and every other receiver waited. It still
   * counts toward its tenant's and its host's shares, and at most IN_FLIGHT_PER_SLOT times the
   * slots are in flight. Holding may pass the slots for a moment when such POSTs end and their
   * outcomes are written: then none is free until it is below again.
   */
  private freeSlots(): number {
    const holding = this.inFlight.size - this.steppedAside.size;
    return Math.min(this.options.concurrency - holding, this.options.concurrency * IN_FLIGHT_PER_SLOT - this.inFlight.size);
  }

  /** Claims the due events that fit in free slots and starts delivering them; returns how many. */
  async startDue(): Promise<number> {
    const slots = this.freeSlots();
    if (slots <= 0) return 0;
    const now = this.deps.now();
    const claimStarted = performance.now();
    const leaseMs = this.options.timeoutMs + LEASE_BEYOND_TIMEOUT_MS;
    // The reads lock nothing and run before the claim's transaction: on SQLite that transaction holds
    // the file's one write lock, which every ack would wait for meanwhile (a review).
    const chosen = await this.chooseDue(this.deps.db, now, slots, await onCitus(this.deps.db));
    if (chosen.length === 0) return 0;
    const ids = chosen.map((e) => e.id);
    const claimed = await inTransaction(this.deps.db, this.deps.tx, (trx) => claimEvents(trx, ids, this.claim, now, leaseMs));
    // The lease runs from before the claim: a claim that waited (for the pool, for a row lock)
    // leaves less of it for the POST, which must end before another replica may claim the event.
    const leaseLeftMs = leaseMs - (performance.now() - claimStarted) - LEASE_SAFETY_MS;
    for (const event of claimed) {
      const done = this.deliver(event, Math.min(this.options.timeoutMs, leaseLeftMs)).finally(() => {
        this.inFlight.delete(event.id);
        this.finished += 1;
        this.onSlotFreed(); // a slot, or room in its tenant's and host's shares
      });
      this.inFlight.set(event.id, { event, done });
    }
    return claimed.length;
  }

  /**
   * The due events to claim for `slots` free slots. First each tenant takes up to its fair share of
   * each host, so other tenants' events for a host that one tenant floods are read and sent; then the
   * tenants held to that share take more there, up to the most one may hold, so no slot idles while
   * only they have events due.
   */
  private async chooseDue(q: Queryable, now: number, slots: number, sharded: boolean): Promise<DueEvent[]> {
    const { fair, most } = this.options.share.perTenantOnHost;
    const chosen: DueEvent[] = [];
    const readDue = (window: number, skip: Saturated) => dueEvents(q, now, window, skip, sharded);
    await this.pickDue(readDue, slots, chosen, fair);
    if (most === fair || chosen.length >= slots) return chosen;
    const held = heldToFairShare(this.loadWith(chosen), this.options.share);
    if (held.length > 0) await this.pickDue(readDue, slots, chosen, most, held);
    return chosen;
  }

  /**
   * Adds due events to `chosen`, up to `slots` in all and no tenant past `onHostLimit` of a host (of
   * `only` these tenants on these hosts, if given). Reads again when a read's window was full yet
   * left slots free: the tenants and hosts its picks filled hid the events behind them.
   */
  private async pickDue(
    readDue: (window: number, skip: Saturated) => Promise<DueEvent[]>,
    slots: number,
    chosen: DueEvent[],
    onHostLimit: number,
    only?: Claimant[],
  ): Promise<void> {
    for (let read = 0; read < READS_PER_PASS; read++) {
      const left = slots - chosen.length;
      if (left <= 0) return;
      const load = this.loadWith(chosen);
      const window = left * CANDIDATES_PER_SLOT;
      const skip = { ...saturated(load, this.options.share, onHostLimit), eventIds: [...this.inFlight.keys(), ...chosen.map((e) => e.id)], only };
      const due = await readDue(window, skip);
      const picked = pickFairly(due, load, this.options.share, left, onHostLimit);
      chosen.push(...picked);
      if (due.length < window || picked.length === left) return;
    }
  }

  private loadWith(chosen: DueEvent[]) {
    return loadOf([...[...this.inFlight.values()].map((f) => f.event), ...chosen]);
  }

  /**
   * Moves due events held back (inOrder in store/outbox.ts) to the time their blockers are next
   * tried, when that is later than a lease from now: a batch.completed behind a first_failure, or
   * behind a child's event, that backs off at a receiver that is down cannot go before then. Left
   * due, each read of due events walked past every one of them again, oldest first: 100,000 such
   * events (a tenant's batches, each with one failure and a dead callback URL) made each read take
   * 1.2 s on MariaDB and 100–160 ms on PostgreSQL and SQLite, several reads a second, for every
   * tenant's callbacks (docs/benchmarks.md). A pass reads up to HELD_READS_PER_PASS pages of each
   * kind, from where the last pass ended (`heldFrom`), so events that cannot wait yet (their blocker
   * is being tried, or is due) never hide those behind them. Returns how many were moved.
   */
  async parkHeld(): Promise<number> {
    let parked = 0;
    for (const kind of MAY_BE_HELD) {
      for (let read = 0; read < HELD_READS_PER_PASS; read++) {
        const now = this.deps.now();
        const page = await dueEventsOfKind(this.deps.db, kind, now, this.heldFrom.get(kind) ?? null, HELD_PER_READ);
        for (const [until, events] of await this.heldByTime(page, now)) parked += await this.park(events, until, now);
        // Once the page is done (a pass that failed reads it again). A short page is the range's end:
        // the next pass starts again from the oldest due.
        this.heldFrom.set(kind, page.length < HELD_PER_READ ? null : page[page.length - 1]!);
        if (page.length < HELD_PER_READ) break;
      }
    }
    return parked;
  }

  /**
   * Moves held events to `until`, then reads their blockers again and gives back, due now, those
   * whose blocker has gone or moved earlier since the read that chose `until`: a child deleted in
   * between (whose delete frees only events already parked, freeHeldEventsUpFrom) left its parent's
   * batch.completed parked behind nothing, up to CALLBACK_BACKOFF_CAP. A change after this second
   * read finds the event parked, and its own step frees it. An event given back frees its
   * ancestors' too: another replica may have parked a grandparent's behind it meanwhile. Returns
   * how many stay moved.
   */
  private async park(events: HeldEvent[], until: number, now: number): Promise<number> {
    const moved = await parkEvents(this.deps.db, events, until, now);
    if (moved === 0) return 0;
    const stillHeld = new Set<HeldEvent>();
    for (const [later, held] of await this.heldByTime(events, now)) if (later >= until) held.forEach((event) => stillHeld.add(event));
    const unheld = events.filter((event) => !stillHeld.has(event));
    const givenBack = await unparkEvents(this.deps.db, unheld, until, now);
    if (givenBack > 0)
      for (const parent of await parentsOf(this.deps.db, [...new Set(unheld.map((e) => e.batchId))]))
        await freeHeldEventsUpFrom(this.deps.db, parent, now, PARK_GRAIN_MS);
    return moved - givenBack;
  }

  /** The held events that can wait, by the time they can wait to (heldUntil), from their blockers' next attempts. */
  private async heldByTime(held: HeldEvent[], now: number): Promise<Map<number, HeldEvent[]>> {
    if (held.length === 0) return new Map();
    const leaseMs = this.options.timeoutMs + LEASE_BEYOND_TIMEOUT_MS;
    const blockers = await blockersNextAttempts(this.deps.db, [...new Set(held.map((e) => e.batchId))]);
    const byTime = new Map<number, HeldEvent[]>();
    for (const event of held) {
      const of = { firstFailure: blockers.firstFailure.get(event.batchId), children: blockers.children.get(event.batchId) };
      const until = heldUntil(event.event, of, now, leaseMs, PARK_GRAIN_MS);
      if (until === null) continue;
      const group = byTime.get(until) ?? [];
      group.push(event);
      byTime.set(until, group);
    }
    return byTime;
  }

  /** Delivers every event due now and waits for those deliveries; returns how many were attempted. */
  async deliverDue(): Promise<number> {
    let attempted = 0;
    for (;;) {
      const finishedBefore = this.finished;
      const started = await this.startDue();
      attempted += started;
      // A delivery that ended while this claim read the outbox may have freed an event waiting
      // for it (a first_failure before its batch.completed): read again before stopping.
      if (this.inFlight.size === 0 && (started > 0 || this.finished !== finishedBefore)) continue;
      if (this.inFlight.size === 0) return attempted;
      if (started === 0) await Promise.race([...this.inFlight.values()].map((f) => f.done));
    }
  }

  /**
   * Ends the deliveries under way (shutdown): waits up to `graceMs` for them, then cuts off the
   * rest, whose events are due again at once. A receiver that hangs held the shutdown for up to
   * CALLBACK_TIMEOUT, as long as SHUTDOWN_TIMEOUT by default, which then ended the process with
   * code 1; and its event waited for the lease to end before another replica sent it.
   */
  async settle(graceMs = STOP_GRACE_MS): Promise<void> {
    const underWay = () => Promise.all([...this.inFlight.values()].map((f) => f.done));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([underWay(), new Promise((resolve) => (timer = setTimeout(resolve, graceMs)))]);
    clearTimeout(timer);
    this.stopping.abort();
    await underWay();
  }

  /** One attempt within `timeoutMs`; none when the lease left none (the event is claimed again once it ends). */
  private async deliver(event: OutboxEvent, timeoutMs: number): Promise<void> {
    if (timeoutMs <= 0) {
      this.deps.observe.delivery('unrecorded');
      this.deps.log.warn({ eventId: event.id, batchId: event.batchId }, 'callback claim outlasted its lease; the event will be retried');
      return;
    }
    let error: string | null;
    const slow = this.stepAsideAfter(event.id, Math.min(SLOW_AFTER_MS, this.options.timeoutMs / 2));
    try {
      error = await this.post(event.url, this.headersFor(event), event.payload, timeoutMs, this.stopping.signal);
    } catch (caught) {
      // A poster that throws (an embedder's own, or node refusing the stored URL) is a failed
      // attempt: its rejection went unhandled and ended the process. Its words stay in the log, as
      // lastError names no more than the four outcomes (a tenant reads it).
      this.logQuietly('threw', event, { err: caught, eventId: event.id, batchId: event.batchId }, 'sending a callback threw; the attempt counts as failed');
      error = 'connection failed';
    } finally {
      // The outcome's write holds a slot again: a slow database does not let writes pile up.
      clearTimeout(slow);
      this.steppedAside.delete(event.id);
    }
    if (error !== null && this.stopping.signal.aborted) return this.giveBack(event);
    this.deps.observe.delivery(await this.record(event, error));
  }

  /** Gives the attempt's slot back if its POST is still unanswered after `ms`, and wakes the loop. */
  private stepAsideAfter(eventId: string, ms: number): NodeJS.Timeout {
    return setTimeout(() => {
      this.steppedAside.add(eventId);
      this.onSlotFreed();
    }, ms).unref();
  }

  /** An attempt the shutdown cut off: not a failure of the receiver's, so the event is due again at once. */
  private async giveBack(event: OutboxEvent): Promise<void> {
    const at = { eventId: event.id, batchId: event.batchId };
    try {
      if (await releaseClaim(this.deps.db, event, this.claim, this.deps.now()))
        this.deps.log.info(at, 'callback attempt cut off by the shutdown; the event is due again now');
    } catch (caught) {
      this.deps.log.warn({ err: caught, ...at }, 'callback attempt cut off by the shutdown; the event is due again when its lease ends');
    }
  }

  /**
   * Writes an attempt's outcome and says what it was. `unrecorded` when it was not written: the
   * lease ran out and another replica claimed the event (it sends the event, or has, and counts
   * that attempt itself: counted here as well, one delivery would count twice), or the write failed.
   */
  private async record(event: OutboxEvent, error: string | null): Promise<DeliveryResult> {
    const now = this.deps.now();
    const at = { eventId: event.id, batchId: event.batchId };
    try {
      if (error === null) {
        if (await markDelivered(this.deps.db, event, this.claim, now)) return 'delivered';
      } else {
        // From its first attempt: an event held back behind another, or untried while no replica
        // ran, gets the whole CALLBACK_MAX_AGE of retries once it may be sent.
        const firstAttemptAt = event.firstAttemptAt ?? event.createdAt;
        const giveUp = now - firstAttemptAt >= this.options.maxAgeMs;
        this.logQuietly(giveUp ? 'dead' : 'failed', event, { ...at, attempts: event.attempts, error, giveUp }, 'callback delivery failed');
        // The last try comes when CALLBACK_MAX_AGE ends, not a whole backoff later: a
        // CALLBACK_BACKOFF_CAP past it kept the event pending, and its batch, that much longer.
        const next = Math.min(now + retryDelay(this.options.backoff, event.attempts), firstAttemptAt + this.options.maxAgeMs);
        if (await markFailed(this.deps.db, event, this.claim, error, giveUp ? null : next)) return giveUp ? 'dead' : 'failed';
      }
      this.deps.log.warn(at, 'callback attempt ended after another replica claimed the event; its outcome is not recorded here');
    } catch (caught) {
      // The lease runs out and the event is tried again: at least once, never lost.
      this.deps.log.warn({ err: caught, ...at }, 'callback outcome not recorded; the event will be retried');
    }
    return 'unrecorded';
  }

  /**
   * A warning about one tenant's callbacks, at most one a second per tenant and kind (LogEvery), the
   * rest at debug: a tenant whose receiver is down fails an attempt for each of its events, and a line
   * for each (a hundred a second for 100,000 events at the longest backoff) buried the log.
   */
  private logQuietly(kind: string, event: OutboxEvent, fields: Record<string, unknown>, message: string): void {
    const quieted = this.failuresLogged.due(`${kind}\u0000${event.tenant}`, performance.now());
    if (quieted === null) this.deps.log.debug(fields, message);
    else this.deps.log.warn({ ...fields, tenant: event.tenant, ...(quieted > 0 ? { quieted } : {}) }, message);
  }

  /** The contract's headers, and the same event id, the attempt's time and a signature as Standard Webhooks names them. */
  private headersFor(event: OutboxEvent): Record<string, string> {
    const timestamp = Math.floor(this.deps.now() / 1000);
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'user-agent': 'rollcall',
      'x-rollcall-event': event.event,
      'x-rollcall-event-id': event.id,
      'webhook-id': event.id,
      'webhook-timestamp': String(timestamp),
    };
    const secret = this.options.secretFor(event.tenant);
    if (secret) {
      headers['x-rollcall-signature'] = signBody(secret, event.payload);
      headers['webhook-signature'] = standardWebhookSignature(secret, event.id, timestamp, event.payload);
    }
    return headers;
  }
}
