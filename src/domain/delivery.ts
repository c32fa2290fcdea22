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

/** The event body, built once and stored, so every retry sends (and signs) the same bytes. */
export function completionEventBody(batch: unknown): string {
  return JSON.stringify({ event: 'batch.completed', batch });
}

/** The body of the other batch events (batch.cancelled, batch.first_failure): tenant beside event and batch. */
export function batchEventBody(event: string, tenant: string, batch: unknown, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ event, tenant, batch, ...extra });
}
