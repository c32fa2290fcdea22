import { toBatchView } from '../contract/batchView';
import { BatchView } from '../contract/responses';
import { Caller, seal } from '../domain/batch';
import { BatchNotOpenError, ExpectedItemsMismatchError } from '../domain/errors';
import { updateBatch } from '../store/batches';
import { announceCompletions, recordCompletions } from './completion';
import { ServiceDeps } from './deps';
import { withLockedBatch } from './existingBatch';

export interface SealResult {
  batch: BatchView;
  /** True only for the one seal that made the batch complete (all items already had outcomes). */
  completedNow: boolean;
}

/**
 * Seals a batch under its row lock. If no group has pending items the batch completes in the same
 * transaction, so a seal racing the last ack completes it exactly once: whichever commits second
 * sees the other's write. Sealing again is a no-op that returns the current state; a cancelled batch
 * cannot be sealed (batch_not_open).
 */
export async function sealBatch(deps: ServiceDeps, caller: Caller, batchId: string, expectedItems?: number): Promise<SealResult> {
  const { next, sealedNow, completedNow } = await withLockedBatch(deps, caller, batchId, async (trx, batch) => {
    if (batch.state === 'cancelled') throw new BatchNotOpenError(batch.id, batch.state);
    if (batch.state !== 'open') return { next: batch, sealedNow: false, completedNow: false };
    if (expectedItems !== undefined && expectedItems !== batch.total) throw new ExpectedItemsMismatchError(expectedItems, batch.total);
    const sealedBatch = seal(batch, deps.now());
    await updateBatch(trx, sealedBatch);
    const complete = sealedBatch.state === 'complete';
    if (complete) await recordCompletions(trx, deps, [sealedBatch]);
    return { next: sealedBatch, sealedNow: true, completedNow: complete };
  });
  if (sealedNow) deps.observe.batchSealed();
  if (completedNow) announceCompletions(deps, [next]);
  return { batch: toBatchView(next), completedNow };
}
