import { toBatchView } from '../contract/batchView';
import { BatchView } from '../contract/responses';
import { BatchState, Caller } from '../domain/batch';
import { InvalidRequestError } from '../domain/errors';
import { formatItemId, isUuid, parseItemId } from '../domain/itemId';
import { listBatches as listBatchRows } from '../store/batches';
import { ServiceDeps } from './deps';
import { findExistingBatch } from './existingBatch';
import { reading } from './reading';

/** One batch by id: a primary-key read, O(1) whatever the batch's size. */
export async function getBatch(deps: ServiceDeps, caller: Caller, batchId: string): Promise<BatchView> {
  return toBatchView(await findExistingBatch(deps, caller, batchId));
}

export interface ListInput {
  state?: BatchState;
  userKey?: string;
  /** Only the children of this batch. */
  parent?: string;
  /** Only the child standing for this item (at most one). */
  parentItem?: string;
  limit: number;
  cursor?: string;
}

export interface BatchPage {
  batches: BatchView[];
  nextCursor: string | null;
}

const CURSOR_PREFIX = 'b1.';

/** The cursor is opaque to clients: the id of the last batch of the page, versioned. */
function encodeCursor(lastId: string): string {
  return Buffer.from(CURSOR_PREFIX + lastId).toString('base64url');
}

function decodeCursor(cursor: string): string {
  const text = Buffer.from(cursor, 'base64url').toString();
  const id = text.slice(CURSOR_PREFIX.length);
  if (!text.startsWith(CURSOR_PREFIX) || !isUuid(id)) throw new InvalidRequestError('cursor is not one this service gave out');
  return id;
}

/** An item ID as children store it (lower case), so any spelling of it finds its child. */
function canonicalItemId(itemId: string): string {
  const ref = parseItemId(itemId);
  if (!ref) throw new InvalidRequestError('query.parentItem: must be an item ID <batchId>:<groupId>:<index>');
  return formatItemId(ref);
}

/** Batches newest first (id order = creation order), filtered, paged by an opaque cursor. */
export async function listBatchPage(deps: ServiceDeps, caller: Caller, input: ListInput): Promise<BatchPage> {
  const beforeId = input.cursor === undefined ? undefined : decodeCursor(input.cursor);
  const parentItem = input.parentItem === undefined ? undefined : canonicalItemId(input.parentItem);
  const found = await reading(() =>
    listBatchRows(deps.db, {
      tenant: caller.tenant,
      state: input.state,
      userKey: input.userKey,
      parentBatchId: input.parent?.toLowerCase(),
      parentItem,
      beforeId,
      limit: input.limit + 1,
    }),
  );
  // The store filters by tenant and userKey exactly (binary collations); checked again here so a
  // lax collation can never show one tenant another's batches.
  const rows = found.filter((b) => b.tenant === caller.tenant && (input.userKey === undefined || b.userKey === input.userKey));
  const page = rows.slice(0, input.limit);
  const last = page[page.length - 1];
  return {
    batches: page.map(toBatchView),
    nextCursor: rows.length > input.limit && last ? encodeCursor(last.id) : null,
  };
}
