import { CommitUnconfirmedError, InvalidRequestError, QuotaExceededError, UnavailableError } from '../domain/errors';
import { unfinishedUsage } from '../store/batches';
import { Db } from '../store/db';
import { outcomeUnknown } from '../store/dbErrors';
import { reading } from './reading';

/** How old a tenant's counted usage may be before a check reads it again. */
const FRESH_MS = 1_000;

/** How long a read may run before callers stop waiting for it and start another (a dead connection). */
const READ_OVERDUE_MS = 5_000;

/** What one tenant's unfinished (open or sealed) batches may hold at most; Infinity for no limit. */
export interface QuotaLimits {
  batches: number;
  items: number;
}

interface Amount {
  batches: number;
  items: number;
}

/** Taken from a tenant's quota: `commit` once its writes committed, `release` if it made nothing. */
export interface Reservation {
  commit(): void;
  release(): void;
}

/**
 * Settles a reservation whose call failed. A call whose outcome the database did not tell may have
 * written: a COMMIT not confirmed, a statement of its own (a root open's INSERT) or a COMMIT whose
 * answer was lost with its connection, or that ran past DB_QUERY_TIMEOUT. Its share counts as made
 * until the next read tells (a little early refused, never late); released, the calls after it
 * within the second could pass the quota by it. Anything else made nothing: a refusal of the
 * client's, a duplicate key, a lock not granted, a deadlock, a pool with no connection to give, a
 * read-only server. (A connection that could not be made at all keeps the share too: its error is
 * the driver's, not told from one lost; a little early refused.)
 */
export function settleFailed(taken: Reservation | undefined, error: unknown): void {
  const cause = error instanceof UnavailableError && !(error instanceof CommitUnconfirmedError) ? error.cause : error;
  if (error instanceof CommitUnconfirmedError || outcomeUnknown(cause)) taken?.commit();
  else taken?.release();
}

/**
 * One tenant's usage as this process knows it: the last read, what this process committed since that
 * read began, and what it reserved and has not settled (calls in flight, which no read sees yet).
 */
class TenantUsage {
  constructor(readonly tenant: string) {}

  read: Amount = { batches: 0, items: 0 };
  readAt = -Infinity;
  readStartedAt = -Infinity;
  sinceRead: Amount = { batches: 0, items: 0 };
  /** Committed since the read now running began: what sinceRead becomes when it lands. */
  sinceNextRead: Amount | null = null;
  inFlight: Amount = { batches: 0, items: 0 };
  running: Promise<void> | null = null;

  total(kind: keyof Amount): number {
    return this.read[kind] + this.sinceRead[kind] + this.inFlight[kind];
  }
}

const addTo = (to: Amount, amount: Amount, sign = 1) => {
  to.batches += sign * amount.batches;
  to.items += sign * amount.items;
};

export type { TenantUsage };

/** Waits for `read` to settle (its rejection included), or about `ms` at the most. */
async function settledWithin(read: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const overdue = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, Math.ceil(ms)) + 1).unref();
  });
  try {
    await Promise.race([read, overdue]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Per-tenant quotas of unfinished batches and of the items they hold (TENANT_MAX_BATCHES,
 * TENANT_MAX_ITEMS). A tenant's usage is read about once a second per process, from one index
 * (migration 0018), however many calls a tenant at its quota sends; on top of it count what this
 * process committed since that read began and what it has reserved and not settled. So within a
 * process calls never pass a limit together (checked and reserved in one synchronous step); across
 * replicas each may pass it by what it does not yet see of the others' (their last second). A batch
 * that finishes frees its share at the next read.
 *
 * Two steps, so that a call is refused only once it would make something: `usage` (may read, before
 * any transaction), then `take` (synchronous, where the call knows it will write: after an
 * Idempotency-Key's repeat is answered and the batch is found open).
 */
export class TenantQuota {
  private readonly tenants = new Map<string, TenantUsage>();

  constructor(
    private readonly db: Db,
    private readonly limits: QuotaLimits,
  ) {}

  /**
   * The tenant's usage, read again first when the last read began more than FRESH_MS before this
   * call. Until such a read has landed: a read is waited for until it is READ_OVERDUE_MS old, then
   * replaced by another (a read on a connection that died may hang until DB_QUERY_TIMEOUT); an
   * overdue read is discarded when it lands, and its waiters wait for the one that replaced it.
   */
  async usage(tenant: string): Promise<TenantUsage> {
    let usage = this.tenants.get(tenant);
    if (!usage) this.tenants.set(tenant, (usage = new TenantUsage(tenant)));
    const oldestFresh = performance.now() - FRESH_MS;
    while (usage.readAt < oldestFresh) {
      if (!usage.running || performance.now() - usage.readStartedAt >= READ_OVERDUE_MS) usage.running = this.readAgain(usage);
      await settledWithin(usage.running, usage.readStartedAt + READ_OVERDUE_MS - performance.now());
    }
    return usage;
  }

  /** Whether the tenant's usage was read within FRESH_MS, so `usage` would not read it again now. */
  isFresh(tenant: string): boolean {
    return (this.tenants.get(tenant)?.readAt ?? -Infinity) >= performance.now() - FRESH_MS;
  }

  /** Takes `amount` from the quota, or throws QuotaExceededError (InvalidRequestError for more than the whole quota). */
  take(usage: TenantUsage, amount: Amount): Reservation {
    if (amount.items > this.limits.items) {
      throw new InvalidRequestError(`body.count: this service's tenants may have at most ${this.limits.items} unfinished items (TENANT_MAX_ITEMS)`);
    }
    if (amount.batches > 0 && usage.total('batches') + amount.batches > this.limits.batches) {
      throw new QuotaExceededError(
        `this tenant has ${usage.total('batches')} unfinished batches, the most it may have (TENANT_MAX_BATCHES ${this.limits.batches}); complete, cancel or delete some first`,
      );
    }
    if (amount.items > 0 && usage.total('items') + amount.items > this.limits.items) {
      throw new QuotaExceededError(
        `this tenant's unfinished batches hold ${usage.total('items')} items; ${amount.items} more would pass TENANT_MAX_ITEMS (${this.limits.items})`,
      );
    }
    addTo(usage.inFlight, amount);
    let settled = false;
    const settle = (committed: boolean) => {
      if (settled) return;
      settled = true;
      addTo(usage.inFlight, amount, -1);
      if (!committed) return;
      addTo(usage.sinceRead, amount);
      if (usage.sinceNextRead) addTo(usage.sinceNextRead, amount);
    };
    return { commit: () => settle(true), release: () => settle(false) };
  }

  private async readAgain(usage: TenantUsage): Promise<void> {
    const startedAt = performance.now();
    usage.readStartedAt = startedAt;
    // Commits from now on may or may not be in what the read sees: count them on top (a little early refused, never late).
    const sinceStart: Amount = { batches: 0, items: 0 };
    usage.sinceNextRead = sinceStart;
    try {
      const found = await reading(() => unfinishedUsage(this.db, usage.tenant));
      if (usage.readStartedAt !== startedAt) return; // an overdue read landing after the one that replaced it
      usage.read = found;
      usage.sinceRead = sinceStart;
      usage.readAt = startedAt;
    } finally {
      if (usage.readStartedAt === startedAt) {
        usage.sinceNextRead = null;
        usage.running = null;
      }
    }
  }
}
