import { v7 as uuidv7 } from 'uuid';
import { BatchRecord, BatchView, Caller, toBatchView } from '../domain/batch';
import { insertBatch } from '../store/batches';
import { asUnavailable } from '../store/transaction';
import { toError } from '../domain/errors';
import { ServiceDeps } from './deps';

export interface OpenBatchInput {
  userKey?: string;
  metadata?: Record<string, unknown>;
  callbackUrl?: string;
}

/** Opens an empty batch. Its id is a UUIDv7, so listing by id is listing by creation order. */
export async function openBatch(deps: ServiceDeps, caller: Caller, input: OpenBatchInput): Promise<BatchView> {
  const now = deps.now();
  const batch: BatchRecord = {
    id: uuidv7(),
    tenant: caller.tenant,
    state: 'open',
    userKey: input.userKey ?? null,
    metadata: input.metadata ?? null,
    callbackUrl: input.callbackUrl ?? null,
    total: 0,
    succeeded: 0,
    failed: 0,
    openGroups: 0,
    createdAt: now,
    updatedAt: now,
    sealedAt: null,
    completedAt: null,
    cancelledAt: null,
    parentItem: null,
    firstFailureAt: null,
    failuresDropped: 0,
  };
  try {
    await insertBatch(deps.db, batch);
  } catch (caught) {
    throw asUnavailable(toError(caught));
  }
  deps.observe.batchOpened();
  return toBatchView(batch);
}
