import { types } from 'node:util';

/**
 * Typed errors with a stable `code`. The HTTP layer maps them to status codes in one place
 * (src/http/errorHandler.ts); nothing else decides a status.
 */
export abstract class RollcallError extends Error {
  abstract readonly code: string;
  abstract readonly status: number;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

export class InvalidRequestError extends RollcallError {
  readonly code = 'invalid_request';
  readonly status = 400;
}

export class PayloadTooLargeError extends RollcallError {
  readonly code = 'payload_too_large';
  readonly status = 413;
}

/** A content type a plain HTML form can send: refused so a cross-site page cannot forge a call. */
export class UnsupportedMediaTypeError extends RollcallError {
  readonly code = 'unsupported_media_type';
  readonly status = 415;
}

/** A Host that is not this loopback service's own name (DNS rebinding). */
export class MisdirectedRequestError extends RollcallError {
  readonly code = 'misdirected_request';
  readonly status = 421;
}

export class BatchNotFoundError extends RollcallError {
  readonly code = 'batch_not_found';
  readonly status = 404;
  constructor(batchId: string) {
    super(`batch ${batchId} does not exist`);
  }
}

export class BatchNotOpenError extends RollcallError {
  readonly code = 'batch_not_open';
  readonly status = 409;
  constructor(batchId: string, state: string) {
    super(
      `batch ${batchId} is ${state}; ${state === 'cancelled' ? 'a cancelled batch takes no more items and no seal' : 'items can only be added to an open batch'}`,
    );
  }
}

export class BatchCompleteError extends RollcallError {
  readonly code = 'batch_complete';
  readonly status = 409;
  constructor(batchId: string) {
    super(`batch ${batchId} is complete; a complete batch cannot be cancelled`);
  }
}

/** An item ID that is malformed, unknown or another tenant's: all answered alike. */
export class ItemNotFoundError extends RollcallError {
  readonly code = 'item_not_found';
  readonly status = 404;
  constructor(itemId: string) {
    super(`item ${itemId} does not exist`);
  }
}

export class ItemNotPendingError extends RollcallError {
  readonly code = 'item_not_pending';
  readonly status = 409;
}

export class ExpectedItemsMismatchError extends RollcallError {
  readonly code = 'expected_items_mismatch';
  readonly status = 409;
  constructor(expected: number, total: number) {
    super(`expectedItems is ${expected} but the batch holds ${total} items; the batch stays open`);
  }
}

export class IdempotencyConflictError extends RollcallError {
  readonly code = 'idempotency_key_reused';
  readonly status = 409;
  constructor(key: string) {
    super(`Idempotency-Key ${JSON.stringify(key)} was already used for an add with another count`);
  }
}

/** A long-poll past what this process holds at once, for all callers or for the caller's tenant (WAIT_MAX). */
export class TooManyWaitsError extends RollcallError {
  readonly code = 'too_many_waits';
  readonly status = 429;
}

/** An open or add past the caller's tenant's quota of unfinished batches or their items (TENANT_MAX_*). */
export class QuotaExceededError extends RollcallError {
  readonly code = 'quota_exceeded';
  readonly status = 429;
}

/** A request past what the caller's tenant may send one process within a window (TENANT_RATE_LIMIT). */
export class RateLimitedError extends RollcallError {
  readonly code = 'rate_limited';
  readonly status = 429;
}

export class UnauthorizedError extends RollcallError {
  readonly code = 'unauthorized';
  readonly status = 401;
}

export class ForbiddenError extends RollcallError {
  readonly code = 'forbidden';
  readonly status = 403;
}

export class RouteNotFoundError extends RollcallError {
  readonly code = 'not_found';
  readonly status = 404;
}

/**
 * The database does not answer (refused, lost, pool exhausted), a lock was not granted within
 * LOCK_TIMEOUT, a transaction kept being aborted, or this process has too much ack work queued:
 * the caller may retry later (the HTTP answer carries Retry-After).
 */
export class UnavailableError extends RollcallError {
  readonly code = 'unavailable';
  readonly status = 503;
}

/**
 * An UnavailableError for a COMMIT that failed in a way that does not say whether it took effect
 * (Citus answers XX000, or no SQLSTATE, when it loses a worker during COMMIT): tried again, it is
 * applied once (acks are idempotent), as after a commit whose answer was lost.
 */
export class CommitUnconfirmedError extends UnavailableError {
  constructor(options?: ErrorOptions) {
    super('the database did not confirm the commit, so whether it took effect is not known; try again', options);
  }
}

/** An UnavailableError for a lock another connection held past LOCK_TIMEOUT (the batch is busy, the database is not away). */
export class LockHeldError extends UnavailableError {
  /**
   * Those of the request's batches found held, when known: a client may send its acks of the others
   * again at once, apart (the answer's `Rollcall-Held-Batches` header; docs/api.md).
   */
  readonly heldBatchIds: readonly string[];

  constructor(options?: ErrorOptions & { heldBatchIds?: readonly string[] }) {
    super('a lock this request needs is held elsewhere (LOCK_TIMEOUT); try again', options);
    this.heldBatchIds = options?.heldBatchIds ?? [];
  }
}

/**
 * The database was migrated by a newer version of rollcall: this one does not start on it (a start
 * refused for a reason the operator fixes, told by its message alone, like a ConfigError).
 */
export class NewerSchemaError extends Error {
  readonly code = 'schema_newer';
  constructor(unknownMigrations: string[]) {
    super(`the database's schema is newer than this version of rollcall (migrations it does not know: ${unknownMigrations.join(', ')}); run the newer version`);
    this.name = 'NewerSchemaError';
  }
}

/**
 * The database is not in UTF-8 (a PostgreSQL database made in LATIN1, or SQL_ASCII): rollcall does
 * not start on it. LATIN1 holds no text beyond Latin-1, and SQL_ASCII stores bytes unchecked and
 * counts a column's length in bytes: text the API takes in metadata, user keys and failure reasons
 * would be refused by the database, answered `500`. Told by its message alone.
 */
export class DatabaseEncodingError extends Error {
  readonly code = 'database_encoding';
  constructor(encoding: string) {
    super(
      `the database's encoding is ${encoding}, not UTF8, so it would refuse text rollcall takes (characters it cannot hold, or lengths it counts in bytes); use a database made with ENCODING 'UTF8' (PostgreSQL's usual encoding)`,
    );
    this.name = 'DatabaseEncodingError';
  }
}

/** Error-shaped objects from another realm (a vm context, a native addon's own error class). */
function isErrorLike(caught: unknown): caught is Error {
  if (types.isNativeError(caught)) return true;
  if (typeof caught !== 'object' || caught === null) return false;
  const { message, stack } = caught as { message?: unknown; stack?: unknown };
  return typeof message === 'string' && typeof stack === 'string';
}

/**
 * Turns whatever a `catch` caught into an Error, keeping the original as `cause`. Errors made in
 * another realm fail `instanceof Error`, hence the shape check.
 */
export function toError(caught: unknown): Error {
  if (caught instanceof Error || isErrorLike(caught)) return caught;
  return new Error(typeof caught === 'string' ? caught : 'non-error thrown', { cause: caught });
}
