/**
 * A handler that opens a child batch for its own item hands that item's outcome to the child:
 * rollcall records it when the child completes (API.md, "Nested batches"). Were the processor or
 * consumer to ack the item `succeeded` when the handler returns, the parent could complete while
 * the child still runs, and the child's failure would then come too late to count.
 */

/** Symbol.for, so that a marker made by another copy of this package is still known. */
const HANDED_TO_CHILD = Symbol.for('rollcall.handedToChild');

export interface HandedToChild<ResultType> {
  readonly [HANDED_TO_CHILD]: true;
  /** The job's result (BullMQ stores it); a message has none. */
  readonly result: ResultType;
}

/**
 * What a handler returns once it has opened a child batch for its own item (`openBatch` or
 * `client.open` with `parentItem`): the job completes, or the message is acked, without acking the
 * item, and the child's outcome records it. `result` is the job's result.
 */
export function handedToChild<ResultType = undefined>(result?: ResultType): HandedToChild<ResultType> {
  return { [HANDED_TO_CHILD]: true, result: result as ResultType };
}

export function isHandedToChild(value: unknown): value is HandedToChild<unknown> {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[HANDED_TO_CHILD] === true;
}
