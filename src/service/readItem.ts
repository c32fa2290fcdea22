import { ItemStatus } from '../contract/responses';
import { itemState } from '../domain/ackPlan';
import { Caller } from '../domain/batch';
import { ItemNotFoundError } from '../domain/errors';
import { formatItemId, parseItemId } from '../domain/itemId';
import { findBatch } from '../store/batches';
import { findGroup } from '../store/groups';
import { ServiceDeps } from './deps';
import { reading } from './reading';

export type ItemView = ItemStatus;

/**
 * One item and its batch's state, so a worker can skip costly work for an item that is done or a
 * batch that is cancelled. Two primary-key reads. Malformed, unknown and other tenants' IDs are
 * all item_not_found.
 */
export async function readItem(deps: ServiceDeps, caller: Caller, itemId: string): Promise<ItemView> {
  const ref = parseItemId(itemId);
  if (!ref) throw new ItemNotFoundError(itemId);
  const batch = await reading(() => findBatch(deps.db, ref.batchId));
  if (!batch || batch.tenant !== caller.tenant) throw new ItemNotFoundError(itemId);
  const group = await reading(() => findGroup(deps.db, ref.batchId, ref.groupId));
  if (!group || ref.index >= group.size) throw new ItemNotFoundError(itemId);
  return { id: formatItemId(ref), batchId: batch.id, state: itemState(group, ref.index), batchState: batch.state };
}
