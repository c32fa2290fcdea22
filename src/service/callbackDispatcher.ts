import { randomUUID } from 'node:crypto';
import { BackoffPolicy, retryDelay, signBody } from '../domain/delivery';
import { toError } from '../domain/errors';
import { claimDueEvents, markDelivered, markFailed, OutboxEvent } from '../store/outbox';
import { inTransaction } from '../store/transaction';
import { ServiceDeps } from './deps';

export interface DeliveryOptions {
  secret?: string;
  timeoutMs: number;
  backoff: BackoffPolicy;
  /** An event still failing this long after it was created is given up (`dead`, kept for operators). */
  maxAgeMs: number;
  /** Events delivered at once by this process. */
  concurrency: number;
}

export interface DeliveryCounters {
  delivered: number;
  failed: number;
  dead: number;
}

/**
 * Delivers completion events from the outbox: claims due events with a lease (so replicas never
 * send one event at the same time), POSTs each, marks it delivered on 2xx, otherwise schedules the
 * next attempt with exponential backoff and jitter. At least once: a crash between the POST and the
 * mark means another attempt, never none; receivers dedupe by X-Rollcall-Event-Id.
 */
export class CallbackDispatcher {
  readonly counters: DeliveryCounters = { delivered: 0, failed: 0, dead: 0 };
  private readonly claim = randomUUID();

  constructor(
    private readonly deps: ServiceDeps,
    private readonly options: DeliveryOptions,
    private readonly send: typeof fetch = fetch,
  ) {}

  /**
   * Claims and delivers every due event (in rounds of `concurrency`) until none is left that may go
   * now; returns how many were attempted. A delivery can free an event that waited for it (a batch's
   * first_failure before its completed, children before their parent), which the next round takes.
   */
  async deliverDue(): Promise<number> {
    let attempted = 0;
    for (;;) {
      const lease = this.options.timeoutMs + 5_000;
      const due = await inTransaction(this.deps.db, this.deps.tx, (trx) => claimDueEvents(trx, this.claim, this.deps.now(), lease, this.options.concurrency));
      const results = await Promise.all(due.map((event) => this.deliver(event)));
      attempted += due.length;
      if (due.length < this.options.concurrency && !results.includes(true)) return attempted;
    }
  }

  /** One attempt; returns true when the event left `pending` (delivered or given up). */
  private async deliver(event: OutboxEvent): Promise<boolean> {
    const error = await this.post(event);
    const now = this.deps.now();
    if (error === null) {
      await markDelivered(this.deps.db, event.id, this.claim, now);
      this.counters.delivered += 1;
      this.deps.observe.delivery('delivered');
      return true;
    }
    const giveUp = now - event.createdAt >= this.options.maxAgeMs;
    await markFailed(this.deps.db, event.id, this.claim, error, giveUp ? null : now + retryDelay(this.options.backoff, event.attempts));
    this.counters[giveUp ? 'dead' : 'failed'] += 1;
    this.deps.observe.delivery(giveUp ? 'dead' : 'failed');
    this.deps.log.warn({ eventId: event.id, batchId: event.batchId, attempts: event.attempts, error, giveUp }, 'callback delivery failed');
    return giveUp;
  }

  /** One attempt; returns null on a 2xx, else what went wrong. */
  private async post(event: OutboxEvent): Promise<string | null> {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'user-agent': 'rollcall',
      'x-rollcall-event': event.event,
      'x-rollcall-event-id': event.id,
    };
    if (this.options.secret) headers['x-rollcall-signature'] = signBody(this.options.secret, event.payload);
    try {
      const res = await this.send(event.url, {
        method: 'POST',
        headers,
        body: event.payload,
        redirect: 'manual',
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
      await res.body?.cancel().catch(() => undefined);
      return res.status >= 200 && res.status < 300 ? null : `HTTP ${res.status}`;
    } catch (caught) {
      const error = toError(caught);
      const cause = (error.cause as { code?: string } | undefined)?.code;
      return error.name === 'TimeoutError' ? `timed out after ${this.options.timeoutMs} ms` : `${error.message}${cause ? ` (${cause})` : ''}`;
    }
  }
}
