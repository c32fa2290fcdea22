import { Knex } from 'knex';

/**
 * Everything that differs between the SQL databases rollcall runs on, declared once (like pg-boss's
 * BACKEND_PROFILES). Store modules read these properties instead of asking which database runs;
 * opening the connections (db.ts) is the only other place that knows the dialects apart.
 *
 * What needs no entry because knex already renders each dialect's form: the upsert
 * (`onConflict().merge()`), bound values, identifier quoting, and the blob type of `table.binary`.
 */
export type DialectName = 'mysql' | 'postgres' | 'sqlite';

export interface DialectProfile {
  name: DialectName;
  /** knex client names that mean this dialect. */
  clients: readonly string[];
  /** `SELECT … FOR UPDATE` takes row locks. SQLite has none: its write transaction excludes every other writer. */
  rowLocks: boolean;
  /**
   * `FOR UPDATE SKIP LOCKED`: the sweeper passes over batches another replica holds, and the ack
   * committer asks which batches of a round are held (the outbox and child-outcome claims are
   * conditional UPDATEs, which Citus takes).
   */
  skipLocked: boolean;
  /**
   * How the hot paths reach the database. `mysql2-multi-statement`: the ack transaction is two
   * round trips on one connection (mysqlDriver.ts) and plain reads skip knex's query objects;
   * `pg-pipeline`: the same two round trips through node-postgres's pipeline mode, the ack's locking
   * reads and its writes each one statement over bound arrays (pgDriver.ts, pgAckStatements.ts), and
   * plain reads skip knex; `knex`: knex runs each statement.
   */
  hotPath: 'mysql2-multi-statement' | 'pg-pipeline' | 'knex';
  /** `pool`: as many writers as connections. `one-per-file`: this process queues its write transactions per file. */
  writers: 'pool' | 'one-per-file';
  /**
   * Whether DDL is part of its transaction: a migration that failed then changed nothing and may run
   * again. On MySQL/MariaDB each DDL statement commits on its own.
   */
  transactionalDdl: boolean;
  /**
   * Whether the planner runs a correlated `NOT EXISTS` on an expression (`substr(col, …) = outer.id`)
   * as one hash anti-join (PostgreSQL). Elsewhere it runs once per outer row, a scan each, while an
   * uncorrelated `NOT IN` is read once into an indexed table (MariaDB, SQLite); PostgreSQL does that
   * only while the subquery's rows fit in work_mem, and past it scans them again for each outer row.
   */
  hashAntiJoins: boolean;
  /** Appended to a raw CREATE TABLE: on MySQL the transactional engine, whatever the server's default. */
  tableOptions: string;
  /**
   * What asks the database whether it answers (db.ts `ping`). On MySQL `DO 1`, which is no read:
   * Galera's causal reads (wsrep_sync_wait) would hold a SELECT behind a schema change the cluster
   * runs in total order, and the watch over migrations would take that for a database that froze.
   */
  pingStatement: string;
  /**
   * How readiness tells that this service's writes would be refused (db.ts `ensureWritable`):
   * `query`, a query whose one row's `read_only` says so; `zero-row-write`, a write that matches no
   * row, which the server refuses as it would any write of this user; null where neither is safe.
   * Writes refused there are still 503 (errors.unavailable).
   */
  writableCheck: { kind: 'query'; sql: string } | { kind: 'zero-row-write' } | null;
  /**
   * A query whose one row's `encoding` names the database's character encoding, where a database may
   * be made in one other than UTF-8 (db.ts `ensureUnicode`: PostgreSQL's LATIN1 or SQL_ASCII); null
   * where every database takes any text (SQLite is UTF-8; on MySQL/MariaDB migration 0015 puts user
   * text in utf8mb4 whatever the server's default).
   */
  encodingQuery: string | null;
  /**
   * The statement that makes this transaction's lock waits end after `ms` (null where a file lock,
   * not a row lock, is waited for). `endsWithTransaction`: false where it holds for the session, so
   * it is set back to LOCK_TIMEOUT's value after the transaction. `atMost`: a wait that must end by
   * a deadline `ms` away, so a server that counts whole seconds rounds it down (0: no wait), not up
   * as it does LOCK_TIMEOUT itself.
   */
  lockWaitStatement(ms: number, atMost?: boolean): { sql: string; bindings: ReadonlyArray<string | number>; endsWithTransaction: boolean } | null;
  /** Driver error codes (never message text): see dbErrors.ts for what each class means. */
  errors: {
    retryable: readonly string[];
    retryablePrefixes: readonly string[];
    lockTimeout: readonly string[];
    /** Another connection holds the database for a moment: worth waiting for (asynchronously) until LOCK_TIMEOUT. */
    busy: readonly string[];
    unavailable: readonly string[];
    unavailablePrefixes: readonly string[];
    /** Among `unavailable`: a write refused because the server or the session takes no writes. */
    readOnly: readonly string[];
    /**
     * Errors the driver raises itself, with no code, when its connection is gone: matched by exact
     * message (node-postgres's own, never the server's text).
     */
    unavailableDriverMessages: readonly string[];
    duplicateKey: readonly string[];
  };
}

/** A lock wait of `ms` as InnoDB takes it: whole seconds, at least one. */
export const lockWaitSeconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000));

/**
 * Socket-level codes every network driver reports when the server is away, or the way to it: no
 * route (a network down in a failover), a name its resolver could not look up for now (a DNS flip).
 * node-postgres marks none of them fatal, as mysql2 does: unlisted, they were 500.
 */
const NETWORK_DOWN = [
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'EADDRNOTAVAIL',
];

/**
 * A server made read-only for a failover (`read_only`, 1290, for users without SUPER), or a
 * session read-only by the server's default (`transaction_read_only`, `tx_read_only`, 1792).
 */
const MYSQL_READ_ONLY = ['ER_OPTION_PREVENTS_STATEMENT', 'ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION'];

/**
 * read_only_sql_transaction: a standby after a failover, a demoted primary, or
 * default_transaction_read_only set on the server, database or role.
 */
const POSTGRES_READ_ONLY = ['25006'];

export const PROFILES: Readonly<Record<DialectName, DialectProfile>> = {
  mysql: {
    name: 'mysql',
    clients: ['mysql2', 'mysql'],
    rowLocks: true,
    skipLocked: true,
    hotPath: 'mysql2-multi-statement',
    writers: 'pool',
    transactionalDdl: false,
    hashAntiJoins: false,
    tableOptions: ' ENGINE=InnoDB',
    pingStatement: 'DO 1',
    // read_only binds only users without SUPER (READ_ONLY ADMIN, CONNECTION_ADMIN), and the session
    // variable is spelt differently by MySQL and MariaDB releases: no one query says what this user
    // may do, but a write that matches no row is refused (1290, 1792) exactly when theirs would be.
    // It writes nothing: no row lock, no binary log event, no Galera write set.
    writableCheck: { kind: 'zero-row-write' },
    encodingQuery: null,
    // Row locks and table/metadata locks alike (db.ts sets both per session).
    lockWaitStatement: (ms, atMost = false) => ({
      sql: 'SET SESSION innodb_lock_wait_timeout = ?, lock_wait_timeout = ?',
      // At most what is left, never below 0 (no wait): a retry past the deadline has less than nothing left.
      bindings: Array(2).fill(atMost ? Math.max(0, Math.floor(ms / 1000)) : lockWaitSeconds(ms)),
      endsWithTransaction: false,
    }),
    errors: {
      // A deadlock, or a Galera certification conflict (also 1213); MySQL Group Replication's
      // certification conflict at COMMIT (3101).
      retryable: ['ER_LOCK_DEADLOCK', 'ER_TRANSACTION_ROLLBACK_DURING_COMMIT'],
      retryablePrefixes: [],
      lockTimeout: ['ER_LOCK_WAIT_TIMEOUT'],
      busy: [],
      unavailable: [
        ...NETWORK_DOWN,
        'PROTOCOL_CONNECTION_LOST',
        'PROTOCOL_SEQUENCE_TIMEOUT',
        'ER_CON_COUNT_ERROR',
        'ER_SERVER_SHUTDOWN',
        'ER_ACCESS_DENIED_ERROR',
        'ER_BAD_DB_ERROR',
        // A Galera node that left the cluster answers 1047 (WSREP has not yet prepared node for
        // application use). It passes, as does a read-only server or session (MYSQL_READ_ONLY).
        'ER_UNKNOWN_COM_ERROR',
        ...MYSQL_READ_ONLY,
        // A statement the server cut short: its own time limit (MySQL's max_execution_time 3024,
        // MariaDB's max_statement_time 1969, which mysql2 has no name for) or an operator's KILL
        // QUERY (1317). Not the request's doing: unanswered, as DB_QUERY_TIMEOUT's own limit is.
        'ER_QUERY_TIMEOUT',
        'ER_ERRNO_1969',
        'ER_QUERY_INTERRUPTED',
        // The server out of room or of resources, or a limit an operator set on the user: its
        // state, not the request's content.
        'ER_DISK_FULL',
        'ER_RECORD_FILE_FULL',
        'ER_OUTOFMEMORY',
        'ER_OUT_OF_RESOURCES',
        'ER_LOCK_TABLE_FULL',
        'ER_TOO_MANY_USER_CONNECTIONS',
        'ER_USER_LIMIT_REACHED',
        // MySQL 8.0.24+: the session outlived wait_timeout and was closed.
        'ER_CLIENT_INTERACTION_TIMEOUT',
        // COMMIT failed in the server (a Galera node that lost the cluster: "Got error 6 during
        // COMMIT"), or a Group Replication member that cannot commit (3100).
        'ER_ERROR_DURING_COMMIT',
        'ER_RUN_HOOK_ERROR',
        // ProxySQL (docs/scaling.md) that reaches no writer: "Max connect timeout reached while
        // reaching hostgroup" (9001, no name in mysql2).
        'ER_ERRNO_9001',
        // The connection lost, told in an error packet, which mysql2 does not mark fatal: MariaDB's
        // or MaxScale's "Connection was killed" (1927), ProxySQL's backend lost mid-query (2013) or
        // gone (2006), the server's own network errors and aborted connections.
        'ER_ERRNO_1927',
        'ER_ERRNO_2013',
        'ER_ERRNO_2006',
        'ER_ABORTING_CONNECTION',
        'ER_NET_READ_ERROR',
        'ER_NET_READ_INTERRUPTED',
        'ER_NET_ERROR_ON_WRITE',
        'ER_NET_WRITE_INTERRUPTED',
      ],
      unavailablePrefixes: [],
      readOnly: MYSQL_READ_ONLY,
      unavailableDriverMessages: [],
      duplicateKey: ['ER_DUP_ENTRY'],
    },
  },
  postgres: {
    name: 'postgres',
    clients: ['pg', 'postgres', 'postgresql'],
    rowLocks: true,
    skipLocked: true,
    hotPath: 'pg-pipeline',
    writers: 'pool',
    transactionalDdl: true,
    hashAntiJoins: true,
    tableOptions: '',
    pingStatement: 'select 1',
    // On in recovery (a standby, a demoted primary after a failover) and where
    // default_transaction_read_only is set for the server, database or role.
    // A query, not a write: it takes no table lock, so a migration's ALTER cannot hold readiness up.
    writableCheck: { kind: 'query', sql: "SELECT current_setting('transaction_read_only') = 'on' AS read_only" },
    encodingQuery: "SELECT current_setting('server_encoding') AS encoding",
    // LOCAL: for this transaction only. At least 1 ms: a lock_timeout of 0 means no limit. A SET
    // statement, not set_config(): Citus sends a SET LOCAL on to the workers where the row locks are
    // taken (with citus.propagate_set_commands = 'local', set per session, db.ts); set_config() it
    // does not. The value is a whole number written here, never input.
    lockWaitStatement: (ms) => ({
      sql: `SET LOCAL lock_timeout = '${Math.max(1, Math.floor(ms))}ms'`,
      bindings: [],
      endsWithTransaction: true,
    }),
    errors: {
      // deadlock_detected, serialization_failure: the server aborted the transaction; run it again.
      retryable: ['40P01', '40001'],
      retryablePrefixes: [],
      // lock_not_available: `lock_timeout` (= LOCK_TIMEOUT) passed.
      lockTimeout: ['55P03'],
      busy: [],
      unavailable: [
        ...NETWORK_DOWN,
        '3D000', // invalid_catalog_name: the database does not exist
        '28000', // invalid_authorization_specification
        '28P01', // invalid_password
        ...POSTGRES_READ_ONLY,
        // idle_in_transaction_session_timeout ended the session (DB_QUERY_TIMEOUT sets it; a
        // service stalled that long mid-transaction meets it on its next statement), and
        // PostgreSQL 17's transaction_timeout, an operator's limit.
        '25P03',
        '25P04',
      ],
      // Whole classes the server answers for its own state, never for a request's content:
      // 08 connection exceptions; 53 insufficient resources (disk_full, out_of_memory,
      // too_many_connections, configuration_limit_exceeded such as temp_file_limit); 57 operator
      // intervention (query_canceled by statement_timeout or pg_cancel_backend, admin_shutdown,
      // crash_shutdown, cannot_connect_now, idle_session_timeout); 58 system errors (io_error).
      unavailablePrefixes: ['08', '53', '57', '58'],
      readOnly: POSTGRES_READ_ONLY,
      unavailableDriverMessages: [
        'Connection terminated unexpectedly',
        'Connection terminated',
        'Connection terminated due to connection timeout',
        'Client has encountered a connection error and is not queryable',
        'Client was closed and is not queryable',
        'timeout expired', // pg's connectionTimeoutMillis: a server that takes the connection but does not answer
        'Query read timeout', // pg's query_timeout (DB_QUERY_TIMEOUT): a statement the server never answered
      ],
      // unique_violation
      duplicateKey: ['23505'],
    },
  },
  sqlite: {
    name: 'sqlite',
    clients: ['better-sqlite3', 'sqlite3'],
    rowLocks: false,
    skipLocked: false,
    hotPath: 'knex',
    writers: 'one-per-file',
    transactionalDdl: true,
    hashAntiJoins: false,
    tableOptions: '',
    pingStatement: 'select 1',
    // A zero-row write would take the file's write lock, outside this process's queue of writers.
    writableCheck: null,
    encodingQuery: null,
    lockWaitStatement: () => null,
    errors: {
      retryable: [],
      // Extended codes: SQLITE_BUSY_SNAPSHOT, SQLITE_BUSY_RECOVERY, SQLITE_LOCKED_SHAREDCACHE …
      retryablePrefixes: ['SQLITE_BUSY_', 'SQLITE_LOCKED'],
      // Plain SQLITE_BUSY ends each short busy_timeout slice; transaction.ts waits the rest of
      // LOCK_TIMEOUT between tries (busy), and what is still busy then is a lock timeout.
      lockTimeout: ['SQLITE_BUSY'],
      busy: ['SQLITE_BUSY'],
      unavailable: ['SQLITE_CANTOPEN', 'SQLITE_FULL', 'SQLITE_NOMEM'],
      // SQLITE_READONLY and its extended codes: a file, directory or disk that no longer takes writes.
      unavailablePrefixes: ['SQLITE_IOERR', 'SQLITE_READONLY'],
      readOnly: [], // SQLite has no writableCheck to tell
      unavailableDriverMessages: [],
      duplicateKey: ['SQLITE_CONSTRAINT_UNIQUE', 'SQLITE_CONSTRAINT_PRIMARYKEY'],
    },
  },
};

/** Anything that runs a query: the pool or an open transaction. */
type Queryable = Knex | Knex.Transaction;

/** The profile of the database `db` talks to. */
export function profileOf(db: Queryable): DialectProfile {
  const client = db.client.config.client as string;
  const profile = Object.values(PROFILES).find((p) => p.clients.includes(client));
  if (!profile) throw new Error(`no dialect profile for the knex client ${client}`);
  return profile;
}

/** Adds FOR UPDATE where the dialect has row locks. */
export function forUpdate<T extends object>(q: Queryable, query: Knex.QueryBuilder<T>): Knex.QueryBuilder<T> {
  return profileOf(q).rowLocks ? query.forUpdate() : query;
}

/** Adds a shared lock (FOR SHARE) where the dialect has row locks: the read sees the newest commit and keeps it. */
export function forShare<T extends object>(q: Queryable, query: Knex.QueryBuilder<T>): Knex.QueryBuilder<T> {
  return profileOf(q).rowLocks ? query.forShare() : query;
}

/** Adds FOR UPDATE SKIP LOCKED where the dialect has it: a claim passes over rows others hold. */
export function forUpdateSkipLocked<T extends object>(q: Queryable, query: Knex.QueryBuilder<T>): Knex.QueryBuilder<T> {
  return profileOf(q).skipLocked ? query.forUpdate().skipLocked() : query;
}
