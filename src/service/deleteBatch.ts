import { Caller } from '../domain/batch';
import { deleteBatchesWithGroups } from '../store/removeBatches';
import { ServiceDeps } from './deps';
import { withLockedBatch } from './existingBatch';

/** Deletes a batch with its groups, idempotency records and callbacks, batch row locked first. */
export async function deleteBatch(deps: ServiceDeps, caller: Caller, batchId: string): Promise<void> {
  await withLockedBatch(deps, caller, batchId, (trx, batch) => deleteBatchesWithGroups(trx, [batch.id]));
}
