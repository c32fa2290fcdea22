import { BatchRecord, Caller } from '../domain/batch';
import { BatchNotFoundError } from '../domain/errors';
import { isUuid } from '../domain/itemId';
import { findBatch, lockBatch } from '../store/batches';
import { Transaction } from '../store/db';
import { ServiceDeps } from './deps';
import { reading } from './reading';

/**
 * The caller's batch as `read` finds it by its lower-case id, or batch_not_found: for ids that are
 * not UUIDs, and for another tenant's batch, which is answered exactly as one that does not exist.
 */
async function existingBatch(caller: Caller, batchId: string, read: (id: string) => Promise<BatchRecord | null>): Promise<BatchRecord> {
  const batch = isUuid(batchId) ? await read(batchId.toLowerCase()) : null;
  if (!batch || batch.tenant !== caller.tenant) throw new BatchNotFoundError(batchId);
  return batch;
}

/** The caller's batch, read without a lock. */
export function findExistingBatch(deps: ServiceDeps, caller: Caller, batchId: string): Promise<BatchRecord> {
  return existingBatch(caller, batchId, (id) => reading(() => findBatch(deps.db, id)));
}

/** The caller's batch, its row locked for the rest of the transaction. */
export function lockExistingBatch(trx: Transaction, caller: Caller, batchId: string): Promise<BatchRecord> {
  return existingBatch(caller, batchId, (id) => lockBatch(trx, id));
}
