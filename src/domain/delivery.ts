import { createHmac, timingSafeEqual } from 'node:crypto';

/** `sha256=<hex HMAC-SHA256 of the raw body>`, the X-Rollcall-Signature header. */
export function signBody(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/** Checks a signature header in constant time (what a receiver does; used by the tests and docs). */
export function verifySignature(secret: string, body: string, header: string | undefined): boolean {
  if (!header) return false;
  const expected = Buffer.from(signBody(secret, body));
  const given = Buffer.from(header);
  return expected.length === given.length && timingSafeEqual(expected, given);
}

/**
 * The Standard Webhooks signature (standardwebhooks.com), the `webhook-signature` header:
 * `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<raw body>">`, keyed by the secret's UTF-8 bytes.
 * Unlike X-Rollcall-Signature it binds the event id and the attempt's time (Unix seconds) to the
 * body: a captured request sent again under another id fails, and one sent again later than the
 * receiver's tolerance can be refused, with no store of every id ever seen.
 */
export function standardWebhookSignature(secret: string, id: string, timestampSeconds: number, body: string): string {
  return `v1,${createHmac('sha256', secret).update(`${id}.${timestampSeconds}.${body}`).digest('base64')}`;
}

export interface BackoffPolicy {
  baseMs: number;
  capMs: number;
}

/**
 * Delay before attempt `attempts + 1` after `attempts` failures: exponential from `baseMs`, capped,
 * with jitter in [50%, 100%] so that receivers coming back are not hit by every retry at once.
 */
export function retryDelay(policy: BackoffPolicy, attempts: number, random: () => number = Math.random): number {
  const exponential = policy.baseMs * 2 ** Math.min(Math.max(attempts - 1, 0), 40);
  const capped = Math.min(policy.capMs, exponential);
  return Math.round(capped * (0.5 + random() * 0.5));
}

/**
 * An event's body (batch.completed, batch.cancelled, batch.first_failure), built once and stored, so
 * every retry sends (and signs) the same bytes. It names the tenant: a receiver that serves several
 * tenants can tell whose batch it is from signed bytes.
 */
export function batchEventBody(event: string, tenant: string, batch: unknown, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ event, tenant, batch, ...extra });
}

/** When each kind of blocker of a held event is next tried, at the latest (none: nothing that waits). */
/**
 * Parked events' times are rounded down to this, so those behind one receiver share few writes, and
 * a parked event is told from one backing off by its time (freeHeldEventsUpFrom). Below the shortest
 * lease (CALLBACK_TIMEOUT's least, 100 ms, plus the lease's margin): a park past the lease always
 * ends in the future.
 */
export const PARK_GRAIN_MS = 5_000;

export interface HeldBlockers {
  firstFailure?: number;
  children?: number;
}

/**
 * Until when an event held back (its batch's batch.first_failure first, and for batch.completed its
 * children's events first) can wait unread: the latest next attempt of its blockers that wait for a
 * retry, rounded down to `grainMs` so that many held events share one write. Null, to leave it due,
 * when that comes within `leaseMs` (a blocker due now or soon may be sent at any moment) or when no
 * blocker waits (those left are being tried).
 */
export function heldUntil(event: string, blockers: HeldBlockers, now: number, leaseMs: number, grainMs: number): number | null {
  const times = [blockers.firstFailure, event === 'batch.completed' ? blockers.children : undefined].filter((t): t is number => t !== undefined);
  if (times.length === 0) return null;
  const latest = Math.max(...times);
  if (latest <= now + leaseMs) return null;
  const until = latest - (latest % grainMs);
  return until > now ? until : null;
}
