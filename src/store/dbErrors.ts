/**
 * Database errors classified by driver code, never by message text.
 * Retryable: the transaction was aborted by the database and can run again from the start at once.
 * Lock timeout: a lock was not granted within LOCK_TIMEOUT; running again would wait as long
 * again, so the request fails with 503 and Retry-After instead.
 * Unavailable: the database does not answer; the request fails with 503.
 */
const RETRYABLE_CODES = new Set(['ER_LOCK_DEADLOCK']);
/** SQLite's extended codes: SQLITE_BUSY_SNAPSHOT, SQLITE_BUSY_RECOVERY, SQLITE_LOCKED_SHAREDCACHE … */
const RETRYABLE_PREFIXES = ['SQLITE_BUSY_', 'SQLITE_LOCKED'];
/** Plain SQLITE_BUSY still there at LOCK_TIMEOUT (transaction.ts waits for it in slices). */
const LOCK_TIMEOUT_CODES = new Set(['ER_LOCK_WAIT_TIMEOUT', 'SQLITE_BUSY']);

const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'ER_CON_COUNT_ERROR',
  'ER_SERVER_SHUTDOWN',
  'ER_ACCESS_DENIED_ERROR',
  'ER_BAD_DB_ERROR',
  // A Galera node that left the cluster answers 1047 (WSREP has not yet prepared node for
  // application use); a server made read-only for a failover answers 1290. Both pass.
  'ER_UNKNOWN_COM_ERROR',
  'ER_OPTION_PREVENTS_STATEMENT',
  'SQLITE_CANTOPEN',
  'SQLITE_IOERR',
  'SQLITE_FULL',
]);

function codeOf(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

export function isRetryable(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && (RETRYABLE_CODES.has(code) || RETRYABLE_PREFIXES.some((p) => code.startsWith(p)));
}

/** SQLite's file is held by another connection (what a busy_timeout slice ends in). */
export function isBusy(error: unknown): boolean {
  return codeOf(error) === 'SQLITE_BUSY';
}

export function isLockTimeout(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && LOCK_TIMEOUT_CODES.has(code);
}

export function isUnavailable(error: unknown): boolean {
  const code = codeOf(error);
  if (code !== undefined && (UNAVAILABLE_CODES.has(code) || code.startsWith('SQLITE_IOERR'))) return true;
  const name = (error as { name?: unknown } | null)?.name;
  // knex raises this when no pooled connection could be had in time: the database is not answering.
  if (name === 'KnexTimeoutError') return true;
  // A fatal mysql2 error means the connection is gone.
  return (error as { fatal?: unknown } | null)?.fatal === true;
}

/** A unique key refused the insert (MySQL ER_DUP_ENTRY, SQLite SQLITE_CONSTRAINT_UNIQUE / _PRIMARYKEY). */
export function isDuplicateKey(error: unknown): boolean {
  const code = codeOf(error);
  return code === 'ER_DUP_ENTRY' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}
