import { AckCall } from '../domain/ackCall';
import { UnavailableError } from '../domain/errors';
import { findBatchTenants } from '../store/batches';
import { ServiceDeps } from './deps';
import { reading } from './reading';

/** Batches whose owner one process remembers; the one learnt first is forgotten first (~5 MB). */
const REMEMBERED = 50_000;

/**
 * Whose each batch an ack call names is, as this process has read it without a lock. With several
 * tenants, a call's targets in another tenant's batch, or in no batch, are marked `foreign` before the
 * call queues: they are answered unknown_batch without their batch row being read, locked or waited
 * for. Before, a call naming another tenant's batch waited for that row's lock while its owner held
 * it (a long add, a stuck replica) and got 503 after LOCK_TIMEOUT, where a batch that does not exist
 * is unknown_batch: the caller learned the batch exists, and its calls took turns with the owner's.
 *
 * What is remembered never goes stale: a batch's tenant never changes, and an id that names no batch
 * never will (ids are the service's own UUIDv7s, handed out only once the batch is committed, so an
 * item's batch is visible to any read after its ID was). The locking read still compares the tenant.
 */
export class BatchOwners {
  /** Batch id → tenant, or null for an id that names no batch. */
  private readonly known = new Map<string, string | null>();
  /** Reads in flight, by batch id: calls naming the same unknown batch share one. */
  private readonly asked = new Map<string, Promise<void>>();

  constructor(
    private readonly deps: ServiceDeps,
    private readonly remembered = REMEMBERED,
  ) {}

  /**
   * Marks the call's targets that are not the caller's. Null when every batch it names was known (the
   * marks are made); else a promise that reads the others first. It rejects only when the database
   * is away (the call would meet that too); another failure leaves those targets unmarked.
   */
  screen(call: AckCall): Promise<void> | null {
    let unknown: Set<string> | undefined;
    for (const target of call.targets) if (!this.known.has(target.batchId)) (unknown ??= new Set()).add(target.batchId);
    if (!unknown) {
      this.mark(call);
      return null;
    }
    return this.lookUp([...unknown]).then(() => this.mark(call));
  }

  private mark(call: AckCall): void {
    for (const target of call.targets) {
      const owner = this.known.get(target.batchId);
      if (owner !== undefined && owner !== call.tenant) target.foreign = true;
    }
  }

  private async lookUp(ids: string[]): Promise<void> {
    const fresh = ids.filter((id) => !this.asked.has(id));
    if (fresh.length > 0) {
      const asking = this.read(fresh).finally(() => {
        for (const id of fresh) this.asked.delete(id);
      });
      for (const id of fresh) this.asked.set(id, asking);
    }
    await Promise.all(ids.map((id) => this.asked.get(id)));
  }

  private async read(ids: string[]): Promise<void> {
    try {
      const tenants = await reading(() => findBatchTenants(this.deps.db, ids));
      for (const id of ids) this.remember(id, tenants.get(id) ?? null);
    } catch (caught) {
      if (caught instanceof UnavailableError) throw caught;
      this.deps.log.warn({ err: caught }, 'could not read whose batches an ack call names; its locking read will tell');
    }
  }

  private remember(id: string, owner: string | null): void {
    if (this.known.size >= this.remembered) this.known.delete(this.known.keys().next().value as string);
    this.known.set(id, owner);
  }
}
