/** What the service answers when it refuses a call, as the client throws it; and when to ask again. */

/** Symbol.for, so that an error made by another copy of this package carries the same mark. */
const API_ERROR: unique symbol = Symbol.for('rollcall.apiError');

/** An error answer of the API, with its stable code (`batch_not_found`, `batch_not_open`, …). */
export class RollcallApiError extends Error {
  /** On the prototype, not the instance: a copy of an error (`{ ...error }`) is no API error. */
  declare readonly [API_ERROR]: true;

  /**
   * `instanceof RollcallApiError` holds for the errors of another copy of this package too (two
   * versions installed, one for the client and one for an integration): told by class, a 404 of the
   * other copy's client was taken for a network error and retried for ~30 s, and the producer's
   * rerun never found its child. Subclasses are told by class as usual.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this !== RollcallApiError) return Function.prototype[Symbol.hasInstance].call(this, value);
    return typeof value === 'object' && value !== null && (value as { [API_ERROR]?: unknown })[API_ERROR] === true;
  }

  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** How long the answer's `Retry-After` asked to wait before sending again, when it had one. */
    readonly retryAfterMs?: number,
    /** Of a `503` for a lock wait, the call's batches the service found held (`Rollcall-Held-Batches`), when it named them. */
    readonly heldBatchIds: readonly string[] = [],
  ) {
    super(message);
    this.name = new.target.name;
  }
}
Object.defineProperty(RollcallApiError.prototype, API_ERROR, { value: true });

/** HTTP's three date forms (RFC 9110): IMF-fixdate, RFC 850 and asctime (which is GMT without saying so). */
const HTTP_DATES: ReadonlyArray<[RegExp, string]> = [
  [/^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT/, ''],
  [/^[A-Z][a-z]+, \d{2}-[A-Z][a-z]{2}-\d{2} \d{2}:\d{2}:\d{2} GMT/, ''],
  [/^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}/, ' GMT'],
];

/**
 * A `Retry-After` value (seconds, or an HTTP date) in milliseconds from now; nothing when unreadable.
 * Of a header sent twice (a proxy's and the service's, joined with ", ") the first counts. Not
 * whatever `Date.parse` reads: it took `1.5` for a day in 2001, so "retry now".
 */
export function retryAfterMs(value: string | null | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  const text = value.trim();
  const seconds = /^(\d+)\s*(?:,|$)/.exec(text);
  if (seconds) return Number(seconds[1]) * 1000;
  for (const [form, zone] of HTTP_DATES) {
    const date = form.exec(text);
    const at = date ? Date.parse(date[0] + zone) : NaN; // a date of that shape may still be none (32 Jan)
    if (!Number.isNaN(at)) return Math.max(0, at - now);
  }
  return undefined;
}

/** The batch ids a `Rollcall-Held-Batches` header names (lower case); none when absent or unreadable. */
export function heldBatchIdsOf(value: string | null | undefined): string[] {
  if (!value) return [];
  return value
    .split(',')
    .map((id) => id.trim().toLowerCase())
    .filter((id) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(id));
}
