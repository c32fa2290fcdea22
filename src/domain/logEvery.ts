/**
 * Which log lines of a kind go at their own level: the first of each key (a tenant, say) in each
 * `everyMs`, and the rest at debug. A tenant can make the service refuse it, or fail its callbacks,
 * thousands of times a second; a line for each filled the log and hid every other tenant's. The
 * line that goes says how many of its key went to debug since the one before (`quieted`).
 */
export class LogEvery {
  private readonly keys = new Map<string, { loggedAt: number; quieted: number }>();

  constructor(
    private readonly everyMs: number,
    /** Keys are tenants and codes, bounded by the configuration; a bound all the same. */
    private readonly maxKeys = 10_000,
  ) {}

  /** The count quieted since the last line of `key` when this one is due (at `now`, ms), else null. */
  due(key: string, now: number): number | null {
    const seen = this.keys.get(key);
    if (seen && seen.loggedAt + this.everyMs > now) {
      seen.quieted += 1;
      return null;
    }
    if (!seen && this.keys.size >= this.maxKeys) this.keys.clear();
    this.keys.set(key, { loggedAt: now, quieted: 0 });
    return seen?.quieted ?? 0;
  }
}
