import { BatchRecord, Caller } from '../domain/batch';
import { BatchNotFoundError } from '../domain/errors';
import { isUuid } from '../domain/itemId';
import { lockBatch } from '../store/batches';
import { Transaction } from '../store/db';

/** Locks the caller's batch row for the rest of the transaction, or fails with batch_not_found. */
export async function lockExistingBatch(trx: Transaction, caller: Caller, batchId: string): Promise<BatchRecord> {
  const batch = isUuid(batchId) ? await lockBatch(trx, batchId.toLowerCase()) : null;
  // Another tenant's batch is answered exactly as one that does not exist.
  if (!batch || batch.tenant !== caller.tenant) throw new BatchNotFoundError(batchId);
  return batch;
}
