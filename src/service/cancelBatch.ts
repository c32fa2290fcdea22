import { toBatchView } from '../contract/batchView';
import { BatchView } from '../contract/responses';
import { Caller, cancelled } from '../domain/batch';
import { BatchCompleteError } from '../domain/errors';
import { updateBatch } from '../store/batches';
import { recordCompletions } from './completion';
import { ServiceDeps } from './deps';
import { withLockedBatch } from './existingBatch';

/**
 * Cancels a batch under its row lock. Acks and seals take the same lock, so exactly one of "the
 * batch completed" and "the batch was cancelled" commits: whichever comes second sees the other.
 * Cancelling again is a no-op; a complete batch cannot be cancelled. The batch.cancelled callback and
 * (for a child) the parent item's failure are written in the same transaction.
 */
export async function cancelBatch(deps: ServiceDeps, caller: Caller, batchId: string): Promise<BatchView> {
  const { batch, cancelledNow } = await withLockedBatch(deps, caller, batchId, async (trx, locked) => {
    if (locked.state === 'complete') throw new BatchCompleteError(locked.id);
    if (locked.state === 'cancelled') return { batch: locked, cancelledNow: false };
    const next = cancelled(locked, deps.now());
    await updateBatch(trx, next);
    await recordCompletions(trx, deps, [next]);
    return { batch: next, cancelledNow: true };
  });
  if (cancelledNow) {
    deps.observe.batchCancelled();
    deps.onCompleted?.([batch]);
  }
  return toBatchView(batch);
}
