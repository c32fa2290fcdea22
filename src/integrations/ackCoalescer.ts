import { AckOptions, MAX_IDS_PER_ACK, RollcallApiError, RollcallClient } from '../client';
import { DEFAULT_RETRY, isTransient, RetryPolicy, retryPolicyOf, withRetries } from '../client/retry';
import { toExactText, truncateText } from '../contract/text';
import { MAX_ERROR_LENGTH } from '../contract/vocabulary';
import { asError, RollcallIntegrationError, warn } from './errors';

export type ItemOutcome = 'succeeded' | 'failed';

/**
 * Calls sent at once before new acks wait for one to return (or for `maxDelayMs`). Four in flight
 * instead of one made the BullMQ no-op benchmark only slightly faster (0.48× vs 0.42× plain BullMQ,
 * within the machine's noise) for 1.7× as many calls; two, once the service stopped making a lone
 * call wait for its merge window, 0.46× vs 0.44× for 1.4× as many calls. The service runs one
 * batch's transactions one after another anyway, so acks gather behind the one call out.
 */
const MAX_CALLS_IN_FLIGHT = 1;

/** How long an ack waits for others by default (the contract's bound: ≤ 10 ms). */
const DEFAULT_MAX_DELAY_MS = 10;

/**
 * How long a call that fails for a transient reason is sent again by default: a worker's jobs (or
 * messages) wait through a rollcall outage this long, holding their slots (prefetch places), so the
 * worker pauses instead of failing work that was done. Before, the tries ended after ~29 s: a BullMQ
 * job then spent an attempt (its last: failed for good, though its handler had succeeded), and an
 * AMQP message went back to the queue, its handler ran again, and before RabbitMQ 4.3 each return
 * counted a delivery, until `x-delivery-limit` dropped it with its item pending. Well below
 * RabbitMQ's `consumer_timeout` (30 minutes by default, counted from the delivery, so the handler's
 * time counts too), past which the broker closes the channel.
 */
const DEFAULT_RETRY_FOR_MS = 10 * 60_000;

/** At most one `ack_delayed` warning a coalescer per this long, however many calls are held. */
const DELAY_WARNING_EVERY_MS = 60_000;

/**
 * How long a call is held before `ack_delayed` is said (or half its `retryForMs`, when shorter): not
 * for a blip the service asks a worker to wait out (`503` with `Retry-After: 1` while its ack queue
 * is full, a `429`, a replica's restart).
 */
const DELAY_WARNING_AFTER_MS = 10_000;

/** The integrations' tries: as many as `retryForMs` allows, with the client's backoff. */
const INTEGRATION_RETRY: RetryPolicy = { attempts: Infinity, firstDelayMs: DEFAULT_RETRY.firstDelayMs };

/** How long a call size learnt from a 413 answer holds (AckCoalescer.callLimit). */
const SIZE_LIMIT_MEMORY_MS = 60_000;

/**
 * A failure reason as the API takes it: longer than MAX_ERROR_LENGTH is cut, not refused, and the
 * characters it refuses (U+0000, lone surrogates) become U+FFFD. A reason is for reading, and a call
 * the service refused would fail every ack in it.
 */
function reasonOf(error: string): string {
  return toExactText(truncateText(error, MAX_ERROR_LENGTH));
}

export interface AckCoalescingOptions {
  /** Longest an ack waits for others before its call is sent. Default 10 ms. */
  maxDelayMs?: number;
  /** Most item IDs in one call (the API's limit is 10,000). Default 10,000. */
  maxIdsPerCall?: number;
  /**
   * How a call that failed for a transient reason (network, 408, 429, 5xx) is sent again: `attempts`
   * (default: as many as `retryForMs` allows) and `firstDelayMs` (default 50; doubling, up to 2 s
   * apart, before each pause is lengthened at random by up to half, so that workers do not all come
   * back at once).
   */
  retry?: Partial<RetryPolicy>;
  /**
   * How long such a call is sent again before its jobs are given up on (their ack fails): no new try
   * starts later than this after its first (but the halves of a call refused as too large, 413, get
   * one try each). Default 10 minutes, or no limit when `retry.attempts` is given (the attempts then
   * decide, as before this option). A rollcall outage that long pauses the worker and fails no work;
   * a process warning (`ack_delayed`, for a call held 10 s, at most one a minute) says so. On
   * RabbitMQ, the longest handler plus this plus the client's `timeoutMs` must stay below the
   * broker's `consumer_timeout` (30 minutes by default, counted from the delivery).
   */
  retryForMs?: number;
}

/** The coalescing options, checked, with their defaults filled in. */
interface CoalescingSettings {
  maxDelayMs: number;
  maxIds: number;
  retry: RetryPolicy;
  retryForMs: number;
}

/**
 * The options' settings; a value none means is refused at once, as `retry`'s are: an unset
 * environment variable's `Number(undefined)` (NaN) made `maxIdsPerCall` no limit at all, so calls
 * above the API's 10,000 IDs were refused whole.
 */
function settingsOf(options: AckCoalescingOptions): CoalescingSettings {
  const maxDelayMs = options.maxDelayMs ?? DEFAULT_MAX_DELAY_MS;
  const maxIdsPerCall = options.maxIdsPerCall ?? MAX_IDS_PER_ACK;
  // A policy that names its attempts keeps them, with no time limit: `attempts: Infinity` was "never give up".
  const retryForMs = options.retryForMs ?? (options.retry?.attempts === undefined ? DEFAULT_RETRY_FOR_MS : Infinity);
  if (!(Number.isFinite(maxDelayMs) && maxDelayMs >= 0)) throw new RangeError(`maxDelayMs must be a number of milliseconds ≥ 0, not ${String(maxDelayMs)}`);
  if (!(maxIdsPerCall === Infinity || (Number.isSafeInteger(maxIdsPerCall) && maxIdsPerCall >= 1)))
    throw new RangeError(`maxIdsPerCall must be a whole number ≥ 1 (Infinity: the API's 10,000), not ${String(maxIdsPerCall)}`);
  if (!(typeof retryForMs === 'number' && retryForMs >= 0))
    throw new RangeError(`retryForMs must be a number of milliseconds ≥ 0 (or Infinity), not ${String(retryForMs)}`);
  return { maxDelayMs, maxIds: Math.min(maxIdsPerCall, MAX_IDS_PER_ACK), retry: retryPolicyOf(options.retry, INTEGRATION_RETRY), retryForMs };
}

/** A time in milliseconds as a person reads it: `300 ms`, `45 s`, `10 min`. */
function durationText(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return ms < 120_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60_000)} min`;
}

/** What rollcall said about one item: `null` when recorded (or a duplicate), else the rejection reason. */
export type Rejected = string | null;

/** An item the service refused, or one the coalescer could not send (`payload_too_large`), and why. */
interface Refusal {
  id: string;
  reason: string;
}

/** The refusal of an item ID too large to be sent even alone (the service answered 413 to it). */
const PAYLOAD_TOO_LARGE = 'payload_too_large';

/**
 * The rejections of one call by item ID; an item not in it was recorded (or was a duplicate), unless
 * it is `unsent`: a call the service refused as too large goes again in parts, and when a later part
 * cannot be sent (rollcall away past `retryForMs`, a `4xx`), the parts already taken still count.
 * Read an item's answer with `rejectionIn`.
 */
export interface Rejections extends ReadonlyMap<string, string> {
  readonly unsent?: { readonly ids: ReadonlySet<string>; readonly error: unknown };
  /**
   * Parts of the call still being sent: acks of batches another connection held, split off so the
   * others could be answered (AckCoalescer.acked). Read an item's answer with `partOf`.
   */
  readonly later?: ReadonlyArray<{ readonly ids: ReadonlySet<string>; readonly answer: Promise<Rejections> }>;
}

/**
 * An item's answer in its part's (`partOf`): `null` when recorded, the reason when rejected; throws
 * when it was not sent.
 */
export function rejectionIn(answer: Rejections, itemId: string): Rejected {
  if (answer.unsent?.ids.has(itemId)) throw answer.unsent.error;
  return answer.get(itemId) ?? null;
}

/** The answer of the part of a call that carried `itemId`: the call's own, or that of a part split off for a held batch, once it has one. */
export async function partOf(answer: Rejections, itemId: string): Promise<Rejections> {
  let part = answer;
  for (;;) {
    const later = part.later?.find((split) => split.ids.has(itemId));
    if (!later) return part;
    part = await later.answer;
  }
}

/** What sending a call's acks came to: see AckCoalescer.sentWhole. */
interface Sent {
  refusals: Refusal[];
  largestTaken: number;
  tooLarge: boolean;
  unsent?: { ids: string[]; error: unknown };
}

/** What a call's acks are sent with: their outcome and reason, the time left for tries, and the call's number. */
interface Sending {
  options: AckOptions;
  until: number;
  call: number;
}

/** What sending a call's acks came to so far; `later`, the parts split off for held batches, still being sent. */
interface Answered {
  sent: Sent;
  later: Array<{ ids: string[]; answer: Promise<Answered> }>;
}

/** A call to split: a `503` named some of its batches held (`held`, their acks) and not the others (`free`). */
class SplitForHeld extends Error {
  constructor(
    readonly held: string[],
    readonly free: string[],
  ) {
    super('some batches of the call are held by another connection');
  }
}

/**
 * Acks waiting for one call. One call carries one outcome and one error message for all its items,
 * and one answer for all of them: a busy worker makes one promise a call, not one an item.
 */
interface Pending {
  /** The call's number, in the order calls were begun (drain's "made before"). */
  call: number;
  outcome: ItemOutcome;
  error: string | undefined;
  ids: string[];
  /** What the IDs add to the call's body, in characters (charsOf). */
  chars: number;
  answer: Promise<Rejections>;
  resolve(rejections: Rejections): void;
  reject(error: unknown): void;
  timer: NodeJS.Timeout | null;
  /** When its first ack was made (performance.now()): `retryForMs` counts from here, not from the sending. */
  openedAt: number;
}

function pendingCall(call: number, outcome: ItemOutcome, error: string | undefined): Pending {
  let resolve!: Pending['resolve'];
  let reject!: Pending['reject'];
  const answer = new Promise<Rejections>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { call, outcome, error, ids: [], chars: 0, answer, resolve, reject, timer: null, openedAt: performance.now() };
}

/** What an ID adds to a call's JSON body, in characters: itself, its quotes and a comma. */
const charsOfId = (id: string): number => id.length + 3;

function charsOf(ids: string[]): number {
  let chars = 0;
  for (const id of ids) chars += charsOfId(id);
  return chars;
}

/** An item ID starts with its batch's id, a UUID. */
const BATCH_ID_LENGTH = 36;

const NOTHING_TAKEN: Sent = { refusals: [], largestTaken: 0, tooLarge: false };

/** Every part's answer, those split off for held batches waited for: the whole call's. */
async function settledOf(answered: Answered): Promise<Sent> {
  let sent = answered.sent;
  for (const { ids, answer } of answered.later) {
    let part: Sent;
    try {
      part = await settledOf(await answer);
    } catch (error) {
      part = { ...NOTHING_TAKEN, unsent: { ids, error } };
    }
    sent = joined(sent, part);
  }
  return sent;
}

/** Two parts' answers as one call's. */
function joined(a: Sent, b: Sent): Sent {
  const unsent = a.unsent && b.unsent ? { ids: [...a.unsent.ids, ...b.unsent.ids], error: a.unsent.error } : (a.unsent ?? b.unsent);
  return {
    refusals: [...a.refusals, ...b.refusals],
    largestTaken: Math.max(a.largestTaken, b.largestTaken),
    tooLarge: a.tooLarge || b.tooLarge,
    ...(unsent && { unsent }),
  };
}

/** Of `ids`, those of the batches a `503` named held, and the others; all `held` when it named none. */
function byHeldBatch(ids: string[], error: unknown): { held: string[]; free: string[] } {
  if (!namesHeldBatches(error)) return { held: ids, free: [] };
  const heldBatches = new Set(error.heldBatchIds);
  const held: string[] = [];
  const free: string[] = [];
  for (const id of ids) (heldBatches.has(id.slice(0, BATCH_ID_LENGTH).toLowerCase()) ? held : free).push(id);
  return { held, free };
}

/** Whether the error is a `503` that names batches held by another connection. */
function namesHeldBatches(error: unknown): error is RollcallApiError {
  return error instanceof RollcallApiError && error.status === 503 && error.heldBatchIds.length > 0;
}

/**
 * Merges the acks of one process into few calls, and answers each ack only after the call that
 * carried it was answered: nothing is reported done that rollcall has not committed.
 *
 * A call goes out on the next turn of the event loop while fewer than MAX_CALLS_IN_FLIGHT are out
 * (acks of the same turn travel together), else when an earlier call returns, or when its first ack
 * has waited `maxDelayMs` (unless a call out is being sent again: rollcall is away or busy), or when
 * it is full. So a worker alone gets its answer in one round trip, a busy one sends calls of many
 * IDs, and through an outage the acks gather into a call per outcome, not one per `maxDelayMs`.
 */
export class AckCoalescer {
  private readonly pending = new Map<string, Pending>();
  private readonly settings: CoalescingSettings;
  /**
   * The most ID characters a call carries: unbounded until the service refuses a call as too large
   * (413), then the largest part it took, for SIZE_LIMIT_MEMORY_MS. A service's BODY_LIMIT counts
   * bytes, not IDs: one long ID among short ones must not teach it to take a handful of IDs a call.
   */
  private maxChars = Infinity;
  /** When `maxChars` was last learnt (performance.now()). */
  private maxCharsLearntAt = 0;
  private inFlight = 0;
  /**
   * Calls out that have been sent again (a transient failure: rollcall away, a `503`). While there are
   * any, a call's `maxDelayMs` does not send it: it waits for a call out to end, or to fill. Before, a
   * worker of 500 slots through an outage sent a call per 10 ms in which a job ended, each sent again
   * every 2–3 s on its own (~200 calls a second from one process), and all of them together once
   * rollcall was back: the most calls when the service is weakest (a review).
   */
  private resending = 0;
  /** How many calls were begun. */
  private calls = 0;
  /** What is being sent, each with the number of the call it belongs to (a part split off for a held batch: its call's). */
  private readonly settled = new Map<Promise<void>, number>();
  /** When the last `ack_delayed` warning went (performance.now()). */
  private delayWarnedAt = -Infinity;

  constructor(
    private readonly client: RollcallClient,
    options: AckCoalescingOptions = {},
  ) {
    this.settings = settingsOf(options);
  }

  /** How long a call is sent again while rollcall cannot be reached: what the workers hold their jobs for. */
  get retryForMs(): number {
    return this.settings.retryForMs;
  }

  /** Acks one item; resolves once rollcall has committed it (`null`) or rejected it (the reason). */
  async ack(itemId: string, outcome: ItemOutcome, error?: string): Promise<Rejected> {
    return rejectionIn(await partOf(await this.ackInCall(itemId, outcome, error), itemId), itemId);
  }

  /**
   * Acks one item; resolves, once rollcall has answered the call that carried it, with that call's
   * rejections (shared by its items: look the item up). The cheaper form, for a worker's hot path.
   */
  ackInCall(itemId: string, outcome: ItemOutcome, error?: string): Promise<Rejections> {
    const reason = outcome === 'failed' && error !== undefined ? reasonOf(error) : undefined;
    const key = reason === undefined ? outcome : `${outcome}\u0000${reason}`;
    const chars = charsOfId(itemId);
    let entry = this.pending.get(key);
    if (entry && entry.chars + chars > this.callLimit()) {
      this.send(key, entry); // full for what the service takes: this ID opens the next call
      entry = undefined;
    }
    if (!entry) {
      entry = pendingCall(++this.calls, outcome, reason);
      this.pending.set(key, entry);
      const first = entry;
      first.timer = setTimeout(() => {
        if (this.resending === 0) this.send(key, first);
      }, this.settings.maxDelayMs);
      if (this.inFlight < MAX_CALLS_IN_FLIGHT) setImmediate(() => this.send(key, first));
    }
    entry.ids.push(itemId);
    entry.chars += chars;
    const answer = entry.answer;
    if (entry.ids.length >= this.settings.maxIds) this.send(key, entry);
    return answer;
  }

  /**
   * The most ID characters a call may carry now. A learnt limit is forgotten after
   * SIZE_LIMIT_MEMORY_MS: one replica briefly run with a small BODY_LIMIT must not keep every later
   * call of the process small for good. If the limit still holds, one call a minute meets it again.
   */
  private callLimit(): number {
    if (this.maxChars !== Infinity && performance.now() - this.maxCharsLearntAt > SIZE_LIMIT_MEMORY_MS) this.maxChars = Infinity;
    return this.maxChars;
  }

  /**
   * Says, at most once a minute, that acks are held through an outage: their jobs wait without
   * failing, and a wrong `baseUrl` (a refused connection, a host not found: an outage too, for all
   * a worker can tell) would otherwise show nothing until `retryForMs` is spent. Only for a call
   * held a while (DELAY_WARNING_AFTER_MS), since `heldSince`. A user name and password in a URL of
   * the error's message are not repeated.
   */
  private warnDelayed(error: unknown, heldSince: number): void {
    const now = performance.now();
    const heldMs = now - heldSince;
    if (heldMs < Math.min(DELAY_WARNING_AFTER_MS, this.settings.retryForMs / 2) || now - this.delayWarnedAt < DELAY_WARNING_EVERY_MS) return;
    this.delayWarnedAt = now;
    const holding = this.settings.retryForMs === Infinity ? 'until it answers' : `for up to ${durationText(this.settings.retryForMs)} (retryForMs)`;
    const reason = asError(error).message.replace(/\/\/[^/@\s]*@/g, '//…@');
    warn(
      new RollcallIntegrationError(
        'ack_delayed',
        `rollcall has not taken acks for ${durationText(heldMs)}; they are sent again ${holding}, their jobs held. The last error: ${reason}`,
        { cause: error },
      ),
    );
  }

  /**
   * Sends what is waiting now and resolves when every ack made before has been answered. Not those
   * made later: other workers of the process may share this coalescer and keep it busy for good.
   * The process stays alive meanwhile, though the pauses between tries alone do not hold it.
   */
  async drain(): Promise<void> {
    for (const [key, entry] of [...this.pending]) this.send(key, entry);
    await keepingProcessAlive(this.sentUpTo(this.calls));
  }

  /** Resolves once calls up to number `call` are answered, with the parts split off them, which a call adds before it is answered. */
  private async sentUpTo(call: number): Promise<void> {
    for (;;) {
      const open = [...this.settled].filter(([, of]) => of <= call).map(([sending]) => sending);
      if (open.length === 0) return;
      await Promise.all(open);
    }
  }

  /** Notes `sending` as part of call number `call` until it settles (drain waits for it). */
  private track(sending: Promise<unknown>, call: number): void {
    const settled = sending.then(
      () => undefined,
      () => undefined,
    );
    this.settled.set(settled, call);
    void settled.then(() => this.settled.delete(settled));
  }

  private send(key: string, entry: Pending): void {
    if (this.pending.get(key) !== entry) return; // already sent by another trigger
    this.pending.delete(key);
    if (entry.timer) clearTimeout(entry.timer);
    this.inFlight += 1;
    const done = this.call(entry).finally(() => {
      this.inFlight -= 1;
      // Acks that gathered while this call was out go now, in one call per outcome and reason.
      for (const [k, e] of [...this.pending]) this.send(k, e);
    });
    this.track(done, entry.call);
  }

  private async call(entry: Pending): Promise<void> {
    try {
      const options: AckOptions = entry.error === undefined ? { outcome: entry.outcome } : { outcome: entry.outcome, error: entry.error };
      // From the first ack's making: acks that waited for a call out being sent again (an outage)
      // are held `retryForMs` in all, not that long again once their own call goes (a review).
      const sending: Sending = { options, until: entry.openedAt + this.settings.retryForMs, call: entry.call };
      const answered = await this.acked(entry.ids, entry.chars, sending);
      const { largestTaken, tooLarge } = answered.sent;
      // Refused for its size (not for one ID too large alone): later calls keep to what was taken.
      if (tooLarge && largestTaken > 0) {
        this.maxChars = Math.min(this.callLimit(), largestTaken); // a limit older than a minute is forgotten first
        this.maxCharsLearntAt = performance.now();
      }
      entry.resolve(this.rejectionsOf(answered));
    } catch (error) {
      entry.reject(error);
    }
  }

  /** A call's answer as its acks read it. */
  private rejectionsOf({ sent, later }: Answered): Rejections {
    const answer: Rejections = new Map(sent.refusals.map((refusal) => [refusal.id, refusal.reason]));
    const parts = later.map(({ ids, answer: part }) => {
      const read = part.then((answered) => this.rejectionsOf(answered));
      read.catch(() => undefined); // read by the part's acks (partOf); not unhandled meanwhile
      return { ids: new Set(ids), answer: read };
    });
    return Object.assign(answer, sent.unsent && { unsent: { ids: new Set(sent.unsent.ids), error: sent.unsent.error } }, parts.length > 0 && { later: parts });
  }

  /**
   * Sends one call's acks. When a `503` names batches of the call found held by another connection
   * (a stuck replica's transaction), the call is split: the acks of its other batches go again at
   * once, in a call of their own, and are answered as soon as that call is (`later` holds the held
   * batches' part, sent on by itself): one held batch must not hold every job whose ack shared its
   * call. Throws only when none of `ids` was taken and the call was not split.
   */
  private async acked(ids: string[], chars: number, sending: Sending): Promise<Answered> {
    try {
      return { sent: await this.sentWhole(ids, chars, sending), later: [] };
    } catch (error) {
      if (!(error instanceof SplitForHeld)) throw error;
      const held = this.acked(error.held, charsOf(error.held), sending);
      // drain waits for every ack of the part, those of parts split off it later too: noted before
      // the call is answered, so a drain that began before the split still finds it.
      this.track(held.then(settledOf), sending.call);
      let free: Answered;
      try {
        free = await this.acked(error.free, charsOf(error.free), sending);
      } catch (freeError) {
        free = { sent: { ...NOTHING_TAKEN, unsent: { ids: error.free, error: freeError } }, later: [] };
      }
      return { sent: free.sent, later: [...free.later, { ids: error.held, answer: held }] };
    }
  }

  /** `acked`, its held parts waited for too: every ack of `ids` answered. */
  private async ackedWhole(ids: string[], sending: Sending): Promise<Sent> {
    return settledOf(await this.acked(ids, charsOf(ids), sending));
  }

  /**
   * Sends the acks, sent again while they fail for a transient reason, except a `503` that names
   * held batches of the call and not all of them (SplitForHeld). A service whose BODY_LIMIT is below
   * what the call takes answers 413: the acks go again in halves until a part is taken (a call of
   * many jobs must not fail them all for its size), and an ID too large to go even alone is refused
   * as `payload_too_large`: its job fails, the others do not. `largestTaken` is the most ID
   * characters of a part that was taken whole; `tooLarge` says a part was refused that held no such
   * ID (its size was the cause). It throws only when none of `ids` was taken; once a part was, the
   * parts that could not be sent are `unsent`, so the jobs of the parts taken are not run again.
   */
  private async sentWhole(ids: string[], chars: number, sending: Sending): Promise<Sent> {
    const { options, until } = sending;
    try {
      const heldSince = performance.now();
      let resent = false;
      const send = async () => {
        try {
          return await this.client.ack(ids, options);
        } catch (error) {
          const { held, free } = byHeldBatch(ids, error);
          throw held.length > 0 && free.length > 0 ? new SplitForHeld(held, free) : error;
        }
      };
      let answer: Awaited<ReturnType<RollcallClient['ack']>>;
      try {
        answer = await withRetries(send, this.settings.retry, {
          until,
          retryable: (error) => !(error instanceof SplitForHeld) && isTransient(error),
          onRetry: (error) => {
            // Not for batches held by another connection: the acks of other batches must go on meanwhile.
            if (!resent && !namesHeldBatches(error)) {
              this.resending += 1;
              resent = true;
            }
            this.warnDelayed(error, heldSince);
          },
          // A worker stopped during an outage (`worker.close(true)`, a closed AMQP connection) must
          // be able to end: its held jobs stall and its messages go back to the queue, to run again.
          // Acks that must not be dropped so hold the process themselves (keepingProcessAlive).
          keepsProcessAlive: false,
        });
      } finally {
        if (resent) this.resending -= 1;
      }
      const { rejected } = answer;
      return { refusals: rejected, largestTaken: chars, tooLarge: false };
    } catch (error) {
      if (!(error instanceof RollcallApiError && error.status === 413)) throw error;
      if (ids.length === 1) return { refusals: [{ id: ids[0] as string, reason: PAYLOAD_TOO_LARGE }], largestTaken: 0, tooLarge: false };
      const halves = [ids.slice(0, Math.ceil(ids.length / 2)), ids.slice(Math.ceil(ids.length / 2))];
      const first = await this.ackedWhole(halves[0]!, sending);
      if (first.unsent) return { ...first, unsent: { ids: [...first.unsent.ids, ...halves[1]!], error: first.unsent.error } };
      let second: Sent;
      try {
        second = await this.ackedWhole(halves[1]!, sending);
      } catch (secondError) {
        second = { ...NOTHING_TAKEN, unsent: { ids: halves[1]!, error: secondError } };
      }
      const refusals = [...first.refusals, ...second.refusals];
      return {
        refusals,
        largestTaken: Math.max(first.largestTaken, second.largestTaken),
        tooLarge: first.tooLarge || second.tooLarge || !refusals.some((refusal) => refusal.reason === PAYLOAD_TOO_LARGE),
        ...(second.unsent && { unsent: second.unsent }),
      };
    }
  }
}

/**
 * `work`, with the process kept alive until it settles: for a caller who waits for acks (a drain, a
 * stop), when the pauses between their tries do not keep it alive by themselves (keepsProcessAlive).
 */
export async function keepingProcessAlive<T>(work: Promise<T>): Promise<T> {
  const holding = setInterval(() => undefined, 2 ** 30);
  try {
    return await work;
  } finally {
    clearInterval(holding);
  }
}

/** The coalescers of each client, by their options: processors and consumers of one process share them. */
const SHARED = new WeakMap<RollcallClient, Map<string, AckCoalescer>>();

/**
 * The process's coalescer for this client and these options, made on first use: every
 * `rollcallProcessor` and `rollcallConsumer` of one client acks through it, so a process with
 * several workers or consumers still merges its acks into few calls (the API's contract: acks of
 * one process are coalesced). Options that differ get a coalescer of their own.
 */
export function sharedCoalescer(client: RollcallClient, options: AckCoalescingOptions = {}): AckCoalescer {
  let byOptions = SHARED.get(client);
  if (!byOptions) SHARED.set(client, (byOptions = new Map()));
  // By value, defaults filled in: options that mean the same share one coalescer. (JSON writes
  // Infinity as null: no finite value is written so.)
  const { maxDelayMs, maxIds, retry, retryForMs } = settingsOf(options);
  const key = JSON.stringify([maxDelayMs, maxIds, retry.attempts, retry.firstDelayMs, retryForMs]);
  let coalescer = byOptions.get(key);
  if (!coalescer) byOptions.set(key, (coalescer = new AckCoalescer(client, options)));
  return coalescer;
}
