import { Caller } from '../domain/batch';
import { PARK_GRAIN_MS } from '../domain/delivery';
import { freeHeldEventsUpFrom } from '../store/outbox';
import { deleteBatchesWithGroups } from '../store/removeBatches';
import { ServiceDeps } from './deps';
import { withLockedBatch } from './existingBatch';

/**
 * Deletes a batch with its groups, idempotency records and callbacks, batch row locked first. A
 * child's parent may have a batch.completed waiting for the child's events: it is due again at once,
 * and so is each ancestor's that waited for the one below (after the commit; should that fail, or this process end first, it goes at the time it waited for).
 */
export async function deleteBatch(deps: ServiceDeps, caller: Caller, batchId: string): Promise<void> {
  const deleted = await withLockedBatch(deps, caller, batchId, async (trx, batch) => {
    await deleteBatchesWithGroups(trx, [batch.id]);
    return batch;
  });
  if (deleted.parentItem === null) return;
  const parentId = deleted.parentItem.slice(0, 36).toLowerCase();
  // The batch is gone whatever happens here: a failure leaves the parent's event to its time, and the DELETE answered 204.
  await freeHeldEventsUpFrom(deps.db, parentId, deps.now(), PARK_GRAIN_MS).catch((err: unknown) =>
    deps.log.warn(
      { err, batchId: deleted.id, parentId },
      "a deleted child's parent batch.completed (or an ancestor's) was not made due now; it goes at its time",
    ),
  );
}
