/**
 * Errors the queue integrations raise themselves, each with a stable `code` (like the API's errors,
 * which reach callers as `RollcallApiError` from the client).
 */
export type IntegrationErrorCode =
  /** The job or message carries no item ID where `itemIdOf` looks. */
  | 'missing_item_id'
  /** rollcall refused the item's ack (`unknown_batch`, `malformed`, …): retrying will not help. */
  | 'ack_rejected'
  /** The failure watch could not record a job BullMQ failed for good (refused, or rollcall out of reach): its item stays pending. */
  | 'failure_unrecorded'
  /**
   * Acks that rollcall could not be reached for are being sent again (`retryForMs`), their jobs or
   * messages held meanwhile: a process warning, at most one a minute, not a failure.
   */
  | 'ack_delayed'
  /** rollcall/amqp could not publish the done copy of a message (`options.queue`): the message is returned instead. */
  | 'copy_failed'
  /** rollcall/amqp could not ack or return a message (the channel's ack, nack or reject threw, not for a closed channel): it stays unacked until its channel closes. */
  | 'settle_failed'
  /**
   * rollcall refuses the worker's token (`401`, or `403`: it lacks the `consume` scope), so no ack
   * would be taken: rollcall/bullmq runs no job meanwhile, it puts them back (a process warning, at
   * most one a minute).
   */
  | 'token_refused'
  /** `openBatch` could not add the items (after retries); the batch is not sealed, see `batchId`. */
  | 'add_failed'
  /** `openBatch`'s `enqueue` threw; the batch is not sealed, see `batchId`. */
  | 'enqueue_failed'
  /** `openBatch` could not seal the batch (after retries; a lost answer may hide a seal that landed), see `batchId`. */
  | 'seal_failed';

export class RollcallIntegrationError extends Error {
  constructor(
    readonly code: IntegrationErrorCode,
    message: string,
    options: { cause?: unknown; batchId?: string; enqueued?: number } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = new.target.name;
    this.batchId = options.batchId;
    this.enqueued = options.enqueued;
  }

  /** The batch concerned, when there is one. */
  readonly batchId: string | undefined;
  /** `openBatch`'s failures: how many item IDs `enqueue` took (their chunks' calls returned) before it. */
  readonly enqueued: number | undefined;
}

/**
 * A process warning for an error nothing else listens for. Node refuses an Error of another realm
 * (a module loaded in a vm context, as Jest loads it) as a warning: then it goes as text, with its
 * name and code.
 */
export function warn(error: RollcallIntegrationError): void {
  try {
    process.emitWarning(error);
  } catch {
    process.emitWarning(error.message, { type: error.name, code: error.code });
  }
}

/**
 * What was thrown, as text. `String()` itself throws for a value without a usable `toString`
 * (`Object.create(null)`, a symbol's description aside): then its type is the text.
 */
export function textOf(thrown: unknown): string {
  try {
    return String(thrown);
  } catch {
    return `a thrown ${Object.prototype.toString.call(thrown)}`;
  }
}

/**
 * The failure reason of what was thrown, as the integrations record it: its `message` when that is a
 * string (an Error of any realm, a plain `{ message }` object), else `fallback` (what was thrown, by
 * default) as text. Not `asError(thrown).message`: that spells an Error of another realm `Error: …`
 * and a plain object `[object Object]`.
 */
export function failureMessageOf(thrown: unknown, fallback: unknown = thrown): string {
  let message: unknown;
  try {
    message = typeof thrown === 'object' && thrown !== null ? (thrown as { message?: unknown }).message : undefined;
  } catch {
    message = undefined; // a getter that throws: the value's text instead
  }
  return typeof message === 'string' ? message : textOf(fallback);
}

/** `unknown` from a catch as an Error, keeping what was thrown as the cause. */
export function asError(thrown: unknown): Error {
  return thrown instanceof Error ? thrown : new Error(textOf(thrown), { cause: thrown });
}
