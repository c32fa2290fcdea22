import { Group, RollcallClient } from '../../src/client';

/** How a test batch is opened: what POST /v1/batches takes, and whether it is sealed after its items are added. */
export interface BatchSetup {
  userKey?: string;
  metadata?: Record<string, unknown>;
  callbackUrl?: string;
  /** An item ID of another batch: the new batch is its child. */
  parentItem?: string;
  /** Sealed once its items are added (the default); false leaves it open. */
  sealed?: boolean;
}

export interface TestBatch {
  id: string;
  groups: Group[];
  /** Every item ID, in order. */
  ids: string[];
}

/**
 * A batch with `count` items, made the way a producer makes one: through the real client
 * (open, add, seal). The client's token, if any, decides the tenant.
 */
export async function batchWith(client: RollcallClient, count: number, setup: BatchSetup = {}): Promise<TestBatch> {
  const { sealed = true, ...opening } = setup;
  const { id } = await client.open(opening);
  const added = count > 0 ? await client.addItems(id, count) : null;
  if (sealed) await client.seal(id);
  return { id, groups: added?.groups ?? [], ids: added ? [...added.itemIds()] : [] };
}
