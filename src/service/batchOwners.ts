import { AckCall } from '../domain/ackCall';
import { UnavailableError } from '../domain/errors';
import { findBatchTenants } from '../store/batches';
import { ServiceDeps } from './deps';
import { reading } from './reading';

/** Answers one process remembers; the one learnt first is forgotten first (~5 MB). */
const REMEMBERED = 50_000;

/** Batch id → tenant, of the ids one read asked about that name a batch. */
type Owners = Map<string, string>;

/**
 * Whether the batches an ack call names are its caller's, as this process has read them without a
 * lock. With several tenants, a call's targets in another tenant's batch are marked `foreign` before
 * the call queues: they are answered unknown_batch without their batch row being read, locked or
 * waited for. Before, a call naming another tenant's batch waited for that row's lock while its
 * owner held it (a long add, a stuck replica) and got 503 after LOCK_TIMEOUT, where a batch that does
 * not exist is unknown_batch: the caller learned the batch exists, and its calls took turns with the
 * owner's.
 *
 * - Only what a read found is remembered, and only for the tenant that asked: a batch's tenant never
 *   changes, so "another tenant's" cannot go stale. "No such batch" is not remembered (a read that
 *   missed a batch, as a lagging replica behind a read-splitting proxy could, must not make its acks
 *   unknown for good): such targets go to the locking read as before, which finds no row to wait for.
 *   Per tenant, so that how fast a tenant's first call naming a batch is answered says nothing of
 *   what other tenants named.
 * - One read runs at a time; ids asked meanwhile go in the next one: a tenant naming many made-up
 *   batches takes one pooled connection, not the pool.
 */
export class BatchOwners {
  /** `${batchId}${tenant}` → whether that batch is another tenant's (fixed-length ids keep keys apart). */
  private readonly known = new Map<string, boolean>();
  /** The read each id waits for: the one running, or the next. */
  private readonly asked = new Map<string, Promise<Owners>>();
  private readonly nextIds = new Set<string>();
  private next: Promise<Owners> | null = null;
  private last: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly deps: ServiceDeps,
    private readonly remembered = REMEMBERED,
  ) {}

  /**
   * Marks the call's targets in another tenant's batch. Null when every batch it names was known for
   * its tenant (the marks are made); else a promise that reads the others first. It rejects only when
   * the database is away (the call would meet that too); another failure leaves them unmarked.
   */
  screen(call: AckCall): Promise<void> | null {
    const foreign = new Set<string>();
    let unknown: Set<string> | undefined;
    for (const target of call.targets) {
      const isForeign = this.known.get(target.batchId + call.tenant);
      if (isForeign === undefined) (unknown ??= new Set()).add(target.batchId);
      else if (isForeign) foreign.add(target.batchId);
    }
    if (!unknown) {
      mark(call, foreign);
      return null;
    }
    const ids = [...unknown];
    return Promise.all(ids.map((id) => this.readOf(id))).then((reads) => {
      reads.forEach((owners, i) => {
        const id = ids[i] as string;
        const owner = owners.get(id);
        if (owner === undefined) return;
        this.remember(id + call.tenant, owner !== call.tenant);
        if (owner !== call.tenant) foreign.add(id);
      });
      mark(call, foreign);
    });
  }

  /** The read that tells whose batch `id` is: the one that already asks, else the next. */
  private readOf(id: string): Promise<Owners> {
    const asking = this.asked.get(id);
    if (asking) return asking;
    this.nextIds.add(id);
    if (!this.next) {
      const read = this.last.then(() => this.readNext());
      this.next = read;
      this.last = read.catch(() => undefined);
    }
    this.asked.set(id, this.next);
    return this.next;
  }

  private async readNext(): Promise<Owners> {
    const ids = [...this.nextIds];
    this.nextIds.clear();
    this.next = null;
    try {
      return await reading(() => findBatchTenants(this.deps.db, ids));
    } catch (caught) {
      if (caught instanceof UnavailableError) throw caught;
      this.deps.log.warn({ err: caught }, 'could not read whose batches ack calls name; their locking reads will tell');
      return new Map();
    } finally {
      for (const id of ids) this.asked.delete(id);
    }
  }

  private remember(key: string, foreign: boolean): void {
    if (this.known.size >= this.remembered && !this.known.has(key)) this.known.delete(this.known.keys().next().value as string);
    this.known.set(key, foreign);
  }
}

function mark(call: AckCall, foreign: Set<string>): void {
  if (foreign.size > 0) for (const target of call.targets) if (foreign.has(target.batchId)) target.foreign = true;
}
