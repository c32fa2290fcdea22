import { Knex } from 'knex';
import { BatchRecord } from '../domain/batch';
import { BatchNotFoundError } from '../domain/errors';
import { isUuid } from '../domain/itemId';
import { lockBatch } from '../store/batches';

/** Locks a batch row for the rest of the transaction, or fails with batch_not_found. */
export async function lockExistingBatch(trx: Knex.Transaction, batchId: string): Promise<BatchRecord> {
  const batch = isUuid(batchId) ? await lockBatch(trx, batchId.toLowerCase()) : null;
  if (!batch) throw new BatchNotFoundError(batchId);
  return batch;
}
