import { Caller } from '../domain/batch';
import { InvalidRequestError } from '../domain/errors';
import { isUuid } from '../domain/itemId';
import { listReasons, ReasonCursor } from '../store/failureReasons';
import { ServiceDeps } from './deps';
import { findExistingBatch } from './existingBatch';
import { reading } from './reading';

export interface FailureView {
  id: string;
  error: string;
  failedAt: string;
}

export interface FailurePage {
  failures: FailureView[];
  nextCursor: string | null;
  dropped: number;
}

const CURSOR_PREFIX = 'f1.';
/** The largest index an item column holds (a 32-bit integer): a larger one would fail PostgreSQL's query. */
const MAX_ITEM_INDEX = 2 ** 31 - 1;

/** Opaque to clients: the last reason of the page, versioned. */
function encodeCursor(at: ReasonCursor): string {
  return Buffer.from(`${CURSOR_PREFIX}${at.failedAt}.${at.groupId}.${at.index}`).toString('base64url');
}

function decodeCursor(cursor: string): ReasonCursor {
  const [failedAt, groupId, index] = Buffer.from(cursor, 'base64url').toString().slice(CURSOR_PREFIX.length).split('.');
  const valid =
    Buffer.from(cursor, 'base64url').toString().startsWith(CURSOR_PREFIX) &&
    /^\d{1,15}$/.test(failedAt ?? '') &&
    isUuid(groupId ?? '') &&
    /^\d{1,10}$/.test(index ?? '') &&
    Number(index) <= MAX_ITEM_INDEX;
  if (!valid) throw new InvalidRequestError('cursor is not one this service gave out');
  return { failedAt: Number(failedAt), groupId: groupId as string, index: Number(index) };
}

/**
 * A batch's kept failure reasons, oldest first (by when the latest reason was given), with the
 * count of reasons that were not kept (`dropped`).
 */
export async function listFailures(deps: ServiceDeps, caller: Caller, batchId: string, input: { limit: number; cursor?: string }): Promise<FailurePage> {
  const after = input.cursor === undefined ? null : decodeCursor(input.cursor);
  const batch = await findExistingBatch(deps, caller, batchId);
  const rows = await reading(() => listReasons(deps.db, batch.id, after, input.limit + 1));
  const page = rows.slice(0, input.limit);
  const last = page[page.length - 1];
  return {
    failures: page.map((r) => ({ id: `${batch.id}:${r.groupId}:${r.index}`, error: r.error, failedAt: new Date(r.failedAt).toISOString() })),
    nextCursor: rows.length > input.limit && last ? encodeCursor({ failedAt: last.failedAt, groupId: last.groupId, index: last.index }) : null,
    dropped: batch.failuresDropped,
  };
}
