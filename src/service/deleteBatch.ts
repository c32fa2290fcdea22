import { Caller } from '../domain/batch';
import { deleteBatchesWithGroups } from '../store/removeBatches';
import { inBatchTransaction } from '../store/transaction';
import { ServiceDeps } from './deps';
import { lockExistingBatch } from './existingBatch';

/** Deletes a batch with its groups, idempotency records and callbacks, batch row locked first. */
export async function deleteBatch(deps: ServiceDeps, caller: Caller, batchId: string): Promise<void> {
  await inBatchTransaction(deps.db, deps.tx, batchId, async (trx) => {
    const batch = await lockExistingBatch(trx, caller, batchId);
    await deleteBatchesWithGroups(trx, [batch.id]);
  });
}
