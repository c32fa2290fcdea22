import { RollcallIntegrationError } from './errors';

/**
 * A user's `itemIdOf` that must give the ID itself. One written as an async function (plain
 * JavaScript lets it be) gives a promise: no ID, and a rejection of it went unhandled and ended the
 * process. Such a promise is let go quietly, and the call throws PromisedItemIdError: rollcall/amqp
 * and the failure watch answer it as any `itemIdOf` that throws, the BullMQ processor as a job
 * without an item ID (failed, unretried).
 */
export function synchronousItemIdOf<T>(itemIdOf: (from: T) => string | undefined): (from: T) => string | undefined {
  return (from) => {
    const itemId: unknown = itemIdOf(from);
    if (!isThenable(itemId)) return itemId as string | undefined;
    try {
      itemId.then(undefined, () => undefined);
    } catch {
      // a `then` that throws: nothing is pending, nothing to let go
    }
    throw new PromisedItemIdError();
  };
}

/** What a wrapped `itemIdOf` throws when it gave a promise: no ID, as when it gives none. */
export class PromisedItemIdError extends RollcallIntegrationError {
  constructor() {
    super('missing_item_id', 'itemIdOf gave a promise; it must give the item ID itself (not async)');
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (typeof value === 'object' || typeof value === 'function') && value !== null && typeof (value as { then?: unknown }).then === 'function';
}
