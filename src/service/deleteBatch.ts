import { deleteAddRequestsOfBatch } from '../store/addRequests';
import { deleteBatchRow } from '../store/batches';
import { deleteGroupsOfBatch } from '../store/groups';
import { inTransaction } from '../store/transaction';
import { ServiceDeps } from './deps';
import { lockExistingBatch } from './lockedBatch';

/** Deletes a batch with its groups and idempotency records, batch row locked first (the lock order). */
export async function deleteBatch(deps: ServiceDeps, batchId: string): Promise<void> {
  await inTransaction(deps.db, deps.tx, async (trx) => {
    const batch = await lockExistingBatch(trx, batchId);
    await deleteGroupsOfBatch(trx, batch.id);
    await deleteAddRequestsOfBatch(trx, batch.id);
    await deleteBatchRow(trx, batch.id);
  });
}
