import { v7 as uuidv7 } from 'uuid';

import { toBatchView } from '../contract/batchView';
import { BatchView } from '../contract/responses';
import { itemState } from '../domain/ackPlan';
import { BatchRecord, Caller } from '../domain/batch';
import { InvalidRequestError, ItemNotFoundError, ItemNotPendingError, toError } from '../domain/errors';
import { formatItemId, parseItemId } from '../domain/itemId';
import { findBatch, insertBatch } from '../store/batches';
import { isDuplicateKey } from '../store/dbErrors';
import { findGroup } from '../store/groups';
import { asUnavailable } from '../store/transaction';
import { ServiceDeps } from './deps';
import { reading } from './reading';
import { settleFailed } from './tenantQuota';

export interface OpenBatchInput {
  userKey?: string;
  metadata?: Record<string, unknown>;
  callbackUrl?: string;
  /** The item of another batch that the new batch (a child) stands for. */
  parentItem?: string;
}

/**
 * Checks that a child may stand for `itemId`: the caller's, existing, pending, in a batch that is
 * not cancelled. Plain reads, no lock on the parent: creating a child never touches two batches in
 * one transaction. An item acked meanwhile only makes the child's later ack of it a duplicate.
 */
async function checkParentItem(deps: ServiceDeps, caller: Caller, itemId: string): Promise<string> {
  const ref = parseItemId(itemId);
  if (!ref) throw new InvalidRequestError('body.parentItem: must be an item ID <batchId>:<groupId>:<index>');
  const parent = await reading(() => findBatch(deps.db, ref.batchId));
  if (!parent || parent.tenant !== caller.tenant) throw new ItemNotFoundError(itemId);
  const group = await reading(() => findGroup(deps.db, ref.batchId, ref.groupId));
  if (!group || ref.index >= group.size) throw new ItemNotFoundError(itemId);
  const state = itemState(group, ref.index);
  if (state !== 'pending') throw new ItemNotPendingError(`item ${itemId} is ${state}; a child batch can only stand for a pending item`);
  if (parent.state === 'cancelled') throw new ItemNotPendingError(`item ${itemId} belongs to a cancelled batch`);
  return formatItemId(ref);
}

/** Opens an empty batch. Its id is a UUIDv7, so listing by id is listing by creation order. */
export async function openBatch(deps: ServiceDeps, caller: Caller, input: OpenBatchInput): Promise<BatchView> {
  if (input.callbackUrl && !deps.callbackTargets.allowsLiteral(new URL(input.callbackUrl))) {
    throw new InvalidRequestError('body.callbackUrl: a loopback, private or link-local address is not allowed here (see CALLBACK_ALLOW_HOSTS)');
  }
  const parentItem = input.parentItem === undefined ? null : await checkParentItem(deps, caller, input.parentItem);
  const usage = await deps.quota?.usage(caller.tenant);
  const taken = usage && deps.quota?.take(usage, { batches: 1, items: 0 });
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
    parentItem,
    firstFailureAt: null,
    failuresDropped: 0,
  };
  try {
    await insertBatch(deps.db, deps.tx, batch);
  } catch (caught) {
    settleFailed(taken ?? undefined, caught);
    const error = toError(caught);
    // The child link's key: another child already stands for this item (also when two creates race).
    if (parentItem !== null && isDuplicateKey(error))
      throw new ItemNotPendingError(`another batch already stands for item ${parentItem} (or one deleted after it ended, its outcome still on its way)`, {
        cause: error,
      });
    throw asUnavailable(error);
  }
  taken?.commit();
  deps.observe.batchOpened();
  return toBatchView(batch);
}
