import { DialectProfile, PROFILES } from './dialect';

/**
 * Database errors classified by driver code, never by message text, from the codes each dialect
 * profile declares (a code belongs to one driver, so every profile's codes are checked).
 * Retryable: the transaction was aborted by the database and can run again from the start at once.
 * Lock timeout: a lock was not granted within LOCK_TIMEOUT; running again would wait as long
 * again, so the request fails with 503 and Retry-After instead.
 * Unavailable: the database does not answer; the request fails with 503.
 */
type ErrorClass = keyof DialectProfile['errors'];

const codes = (kind: ErrorClass) => new Set(Object.values(PROFILES).flatMap((p) => p.errors[kind]));
const prefixes = (kind: ErrorClass) => Object.values(PROFILES).flatMap((p) => p.errors[kind]);

const RETRYABLE = codes('retryable');
const RETRYABLE_PREFIXES = prefixes('retryablePrefixes');
const LOCK_TIMEOUT = codes('lockTimeout');
const BUSY = codes('busy');
const UNAVAILABLE = codes('unavailable');
const UNAVAILABLE_PREFIXES = prefixes('unavailablePrefixes');
const READ_ONLY = codes('readOnly');
const DUPLICATE_KEY = codes('duplicateKey');
const DRIVER_GONE_MESSAGES = codes('unavailableDriverMessages');

/**
 * The driver's code of an error. mysql2 names the server's error numbers it knows (`ER_…`) and leaves
 * `code` out for those it does not, MariaDB's own among them: those are `ER_ERRNO_<number>`.
 */
function codeOf(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const { code, errno, sqlState } = error as { code?: unknown; errno?: unknown; sqlState?: unknown };
  if (typeof code === 'string') return code;
  return typeof errno === 'number' && typeof sqlState === 'string' ? `ER_ERRNO_${errno}` : undefined;
}

export function isRetryable(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && (RETRYABLE.has(code) || RETRYABLE_PREFIXES.some((p) => code.startsWith(p)));
}

/** The database is held by another connection for a moment (SQLite's busy_timeout slice ended). */
export function isBusy(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && BUSY.has(code);
}

export function isLockTimeout(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && LOCK_TIMEOUT.has(code);
}

export function isUnavailable(error: unknown): boolean {
  const code = codeOf(error);
  if (code !== undefined && (UNAVAILABLE.has(code) || UNAVAILABLE_PREFIXES.some((p) => code.startsWith(p)))) return true;
  const name = (error as { name?: unknown } | null)?.name;
  // knex raises this when no pooled connection could be had in time: the database is not answering.
  if (name === 'KnexTimeoutError') return true;
  // A fatal mysql2 error means the connection is gone.
  if ((error as { fatal?: unknown } | null)?.fatal === true) return true;
  // node-postgres's own connection-loss errors carry no code; knex puts the statement before the message.
  const message = (error as { message?: unknown } | null)?.message;
  if (code !== undefined || typeof message !== 'string') return false;
  return [...DRIVER_GONE_MESSAGES].some((gone) => message === gone || message.endsWith(` - ${gone}`));
}

/**
 * A statement whose outcome the database did not tell: its connection was lost, or its answer did
 * not come within DB_QUERY_TIMEOUT, after it may have run (a write may have committed). Not a pool
 * that had no connection to give (nothing was sent), nor a server that refused the write.
 */
export function outcomeUnknown(error: unknown): boolean {
  return isUnavailable(error) && !isReadOnly(error) && (error as { name?: unknown } | null)?.name !== 'KnexTimeoutError';
}

/** A write refused because the server or the session takes no writes (also isUnavailable). */
export function isReadOnly(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && READ_ONLY.has(code);
}

/** A unique key refused the insert. */
export function isDuplicateKey(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && DUPLICATE_KEY.has(code);
}
