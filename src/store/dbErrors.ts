/**
 * Database errors classified by driver code, never by message text.
 * Retryable: the transaction was aborted by the database and can run again from the start.
 * Unavailable: the database does not answer; the request fails with 503.
 */
const RETRYABLE_CODES = new Set(['ER_LOCK_DEADLOCK', 'ER_LOCK_WAIT_TIMEOUT']);
/** SQLite's extended codes: SQLITE_BUSY_SNAPSHOT, SQLITE_BUSY_RECOVERY, SQLITE_LOCKED_SHAREDCACHE … */
const RETRYABLE_PREFIXES = ['SQLITE_BUSY', 'SQLITE_LOCKED'];

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
