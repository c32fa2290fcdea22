import { BatchRecord, Caller } from '../domain/batch';
import { BatchNotFoundError } from '../domain/errors';
import { isUuid } from '../domain/itemId';
import { findBatch, lockBatch } from '../store/batches';
import { Transaction } from '../store/db';
import { inBatchTransaction } from '../store/transaction';
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

/**
 * Runs `work` in a transaction that holds the caller's batch row locked (add, seal, cancel, delete),
 * in this process's one queue for that batch (inBatchTransaction). The queue is the batch's by its
 * lower-case id: the same batch spelt in other cases (2^20 spellings of a UUID) took a queue each, so
 * many calls again waited for its row on pooled connections, the pool ran dry, and other tenants'
 * requests got 503. An id that is not a UUID is batch_not_found without a transaction.
 *
 * The batch is first read without a lock: another tenant's call is answered batch_not_found before
 * it joins the batch's queue or waits for its row. Else, while the row was locked, it got 503 after
 * LOCK_TIMEOUT, which told it the batch exists, and its calls took turns with the owner's.
 * `whenFound` runs on what that read found, before the transaction (a read the work may need, done
 * without holding the row).
 */
export async function withLockedBatch<T>(
  deps: ServiceDeps,
  caller: Caller,
  batchId: string,
  work: (trx: Transaction, batch: BatchRecord) => Promise<T>,
  whenFound?: (batch: BatchRecord) => Promise<void>,
): Promise<T> {
  const found = await findExistingBatch(deps, caller, batchId);
  await whenFound?.(found);
  return inBatchTransaction(deps.db, deps.tx, batchId.toLowerCase(), async (trx) =>
    work(trx, await existingBatch(caller, batchId, (id) => lockBatch(trx, id))),
  );
}
