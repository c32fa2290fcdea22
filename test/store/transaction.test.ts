import knex, { Knex } from 'knex';

import { Db, openDb } from '../../src/store/db';
import { migrateLatest } from '../../src/store/migrations';
import { inBatchTransaction, inTransaction } from '../../src/store/transaction';
import { backends, describeEachOrSkip, isPostgresBackend, serverBackends, TestDatabase } from '../helpers/backends';

const servers = serverBackends();
const describeOnServers = describeEachOrSkip(servers);

/**
 * Two transactions that lock rows a and b in opposite orders: the server aborts one as a deadlock.
 * `swallow`: each catches its second statement's error and goes on, as a careless caller might.
 */
function crossLock(db: Db, retries: number, retried: string[], swallow = false) {
  let arrived = 0;
  let release!: () => void;
  const bothHoldFirstLock = new Promise<void>((resolve) => (release = resolve));
  const run = (first: string, second: string) => {
    let attempt = 0;
    return inTransaction(db, { retries, onRetry: (err) => retried.push((err as Error & { code: string }).code) }, async (trx: Knex.Transaction) => {
      attempt += 1;
      await trx('scratch').where({ id: first }).forUpdate();
      if (attempt === 1) {
        if (++arrived === 2) release();
        await bothHoldFirstLock;
      }
      const increment = trx('scratch').where({ id: second }).increment('n', 1);
      await (swallow ? increment.catch(() => undefined) : increment);
    });
  };
  return [run('a', 'b'), run('b', 'a')];
}

/** The deadlock code of each server. */
const DEADLOCK: Record<string, string> = { mysql: 'ER_LOCK_DEADLOCK', pg: '40P01', pgbouncer: '40P01', citus: '40P01', sqlite: 'none' };

describeOnServers('transactions aborted by the database (%s)', (name, backend) => {
  let database: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    database = await backend.create();
    db = openDb(database.config);
    await db.schema.createTable('scratch', (t) => {
      t.string('id').primary();
      t.integer('n').notNullable();
    });
  });
  beforeEach(async () => {
    await db('scratch').delete();
    await db('scratch').insert([
      { id: 'a', n: 0 },
      { id: 'b', n: 0 },
    ]);
  });
  afterAll(async () => {
    await db.destroy();
    await database.drop();
  });

  it('when two transactions deadlock, then the loser is retried and both commit exactly once', async () => {
    const retried: string[] = [];
    await Promise.all(crossLock(db, 3, retried));
    expect(retried).toEqual([DEADLOCK[name]]);
    expect(await db('scratch').orderBy('id')).toEqual([
      { id: 'a', n: 1 },
      { id: 'b', n: 1 },
    ]);
  });

  it('when retries are used up, then the caller gets 503 caused by the deadlock, its work rolled back', async () => {
    const retried: string[] = [];
    const results = await Promise.allSettled(crossLock(db, 0, retried));
    const failed = results.filter((r) => r.status === 'rejected');
    expect(failed).toHaveLength(1);
    const reason = (failed[0] as PromiseRejectedResult).reason;
    expect(reason).toMatchObject({ code: 'unavailable', status: 503 });
    expect(reason.cause.code).toBe(DEADLOCK[name]);
    const total = (await db('scratch')).reduce((sum: number, row: { n: number }) => sum + row.n, 0);
    expect(total).toBe(1);
  });

  it('when work catches a deadlock and goes on, then the transaction is still run again, and both commit exactly once', async () => {
    const retried: string[] = [];
    await Promise.all(crossLock(db, 3, retried, true));
    expect(retried).toEqual([DEADLOCK[name]]);
    expect(await db('scratch').orderBy('id')).toEqual([
      { id: 'a', n: 1 },
      { id: 'b', n: 1 },
    ]);
  });
});

/** The duplicate-key code of each database. */
const DUPLICATE_KEY: Record<string, string> = {
  sqlite: 'SQLITE_CONSTRAINT_PRIMARYKEY',
  mysql: 'ER_DUP_ENTRY',
  pg: '23505',
  pgbouncer: '23505',
  citus: '23505',
};

describe.each(backends())('a statement that failed inside a transaction (%s)', (name, backend) => {
  let database: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    database = await backend.create();
    db = openDb(database.config);
    await migrateLatest(db); // SQLite's write transactions claim the file with a statement on the schema's tables
    await db.schema.createTable('scratch', (t) => t.string('id').primary());
  });
  afterAll(async () => {
    await db.destroy();
    await database.drop();
  });

  it('when work catches its error and goes on, then the transaction is not answered as done, and none of its writes are kept', async () => {
    await db('scratch').insert({ id: 'a' });
    const careless = inTransaction(db, { retries: 3 }, async (trx) => {
      await trx('scratch').insert({ id: 'b' });
      await trx('scratch')
        .insert({ id: 'a' })
        .catch(() => undefined); // a duplicate key, caught
      await trx('scratch')
        .insert({ id: 'c' })
        .catch(() => undefined); // PostgreSQL refuses every statement after it
      return 'done';
    });
    await expect(careless).rejects.toMatchObject({ code: DUPLICATE_KEY[name] });
    expect((await db('scratch').orderBy('id')).map((row: { id: string }) => row.id)).toEqual(['a']);
  });
});

type MysqlQuery = (options: string | { sql: string }, ...rest: unknown[]) => unknown;

/** Makes the connection's statements that set the session's lock wait fail, as a server might refuse them; counts them. */
function refuseLockWaitSettings(connection: { query: MysqlQuery }): { refused: number } {
  const seen = { refused: 0 };
  const query = connection.query.bind(connection);
  connection.query = (queryOptions, ...rest) => {
    const sql = typeof queryOptions === 'string' ? queryOptions : queryOptions.sql;
    const callback = rest.find((arg) => typeof arg === 'function') as ((error: Error) => void) | undefined;
    if (!sql.startsWith('SET SESSION innodb_lock_wait_timeout') || !callback) return query(queryOptions, ...rest);
    seen.refused += 1;
    process.nextTick(() => callback(Object.assign(new Error('refused by the test'), { code: 'ER_UNKNOWN_ERROR' })));
    return undefined;
  };
  return seen;
}

describeEachOrSkip(servers.filter(([name]) => name === 'mysql'))('the lock wait of a transaction whose turn came late (%s)', (_name, backend) => {
  let database: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    database = await backend.create({ LOCK_TIMEOUT: '5s' });
    db = openDb(database.config);
  });
  afterAll(async () => {
    await db.destroy();
    await database.drop();
  });

  const waitOf = async (runner: Knex | Knex.Transaction): Promise<number> =>
    Number((await runner.raw('SELECT @@SESSION.innodb_lock_wait_timeout AS seconds'))[0][0].seconds);
  const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it.each([
    ['succeeded', 'refused by the test'],
    ['failed', 'the work failed'],
  ])(
    'when its work %s and setting its usual wait back is refused twice on a live connection, then that connection is not handed out again with the shorter wait',
    async (outcome, thrown) => {
      const usual = await db.transaction(waitOf);
      const options = { retries: 0, lockTimeoutMs: database.config.LOCK_TIMEOUT };
      // The first transaction holds the batch's turn for 1.2 s: the second's turn comes late, so it
      // waits at most what is left of LOCK_TIMEOUT for locks, and sets the usual wait back after its work.
      const first = inBatchTransaction(db, options, `batch-${outcome}`, () => pause(1200));
      let used: { query: MysqlQuery } | null = null;
      let shorter = 0;
      let seen = { refused: 0 };
      const second = inBatchTransaction(db, options, `batch-${outcome}`, async (trx) => {
        used = (await trx.client.acquireConnection()) as { query: MysqlQuery };
        shorter = await waitOf(trx);
        seen = refuseLockWaitSettings(used);
        if (outcome === 'failed') throw new Error('the work failed');
      });
      await first;
      await expect(second).rejects.toThrow(thrown);
      expect({ shorter: shorter < usual, refused: seen.refused }).toEqual({ shorter: true, refused: 2 });
      // Every connection the pool hands out now waits the usual time, and none is the one refused.
      const max = Number((db.client.config.pool as { max: number }).max);
      const connections = await Promise.all(Array.from({ length: max }, () => db.client.acquireConnection()));
      try {
        expect(connections.includes(used)).toBe(false);
      } finally {
        await Promise.all(connections.map((connection: unknown) => db.client.releaseConnection(connection)));
      }
      const waits = await Promise.all(Array.from({ length: max }, () => db.transaction(waitOf)));
      expect(waits).toEqual(Array(max).fill(usual));
    },
  );
});

describeOnServers('transactions of one batch in one process (%s)', (_name, backend) => {
  it('when one waits behind a transaction of its batch that runs past LOCK_TIMEOUT, then it is 503 at LOCK_TIMEOUT, and never runs', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      const options = { retries: 0, lockTimeoutMs: 1000 };
      // A large batch's delete, say: the first holds the batch's turn for 3 s.
      const first = inBatchTransaction(db, options, 'a-batch', () => new Promise((resolve) => setTimeout(resolve, 3000)));
      let ran = false;
      const started = performance.now();
      const second = inBatchTransaction(db, options, 'a-batch', async () => void (ran = true));
      await expect(second).rejects.toMatchObject({ code: 'unavailable', status: 503 });
      const waited = performance.now() - started;
      await first;
      expect({ answeredBeforeTheFirstEnded: waited < 2500, ran }).toEqual({ answeredBeforeTheFirstEnded: true, ran: false });
      // The batch's queue goes on: a later transaction runs.
      expect(await inBatchTransaction(db, options, 'a-batch', async () => 'ran')).toBe('ran');
    } finally {
      await db.destroy();
      await database.drop();
    }
  });
});

const postgres = backends().filter(([name]) => isPostgresBackend(name));

describeEachOrSkip(postgres)('the settings a PostgreSQL transaction runs with (%s)', (name, backend) => {
  it('when the database defaults to another isolation, then each transaction still reads committed, waits LOCK_TIMEOUT, and leaves no setting behind', async () => {
    const database = await backend.create({ LOCK_TIMEOUT: '1500ms' });
    const serverName = new URL(database.config.DATABASE_URL as string).pathname.slice(1);
    // The server itself, not PgBouncer (the coordinator on Citus), where a database's defaults are set.
    const admin = knex({ client: 'pg', connection: name === 'citus' ? process.env.TEST_CITUS_URL : process.env.TEST_PG_URL, pool: { min: 0, max: 1 } });
    await admin.raw(`ALTER DATABASE ${serverName} SET default_transaction_isolation = 'repeatable read'`);
    await admin.destroy();
    const db = openDb(database.config);
    try {
      const inside = await Promise.all(
        Array.from({ length: 8 }, () =>
          inTransaction(db, { retries: 0 }, async (trx) => {
            const { rows } = await trx.raw("SELECT current_setting('transaction_isolation') AS isolation, current_setting('lock_timeout') AS wait");
            return rows[0] as { isolation: string; wait: string };
          }),
        ),
      );
      expect(inside).toEqual(Array.from({ length: 8 }, () => ({ isolation: 'read committed', wait: '1500ms' })));
      // Behind a pooler in transaction mode, a server session is lent to whoever comes next: the
      // transactions' settings must have ended with them. (Elsewhere each session keeps its own.)
      const outside = await Promise.all(Array.from({ length: 8 }, () => db.raw("SELECT current_setting('lock_timeout') AS wait")));
      const expected = name === 'pgbouncer' ? '0' : '1500ms';
      expect(outside.map((result) => (result.rows[0] as { wait: string }).wait)).toEqual(Array.from({ length: 8 }, () => expected));
    } finally {
      await db.destroy();
      await database.drop();
    }
  });
});

/**
 * Makes the database refuse writes, as a failover's standby or the server's default would; returns
 * the Db to use then. PostgreSQL: the database's default, which new sessions take (not behind a
 * pooler, whose server sessions outlive the change).
 */
async function refusingWrites(name: string, database: TestDatabase, db: Db): Promise<Db> {
  if (name === 'sqlite') await db.raw('PRAGMA query_only = ON');
  if (name === 'mysql') await db.raw('SET SESSION TRANSACTION READ ONLY'); // the pool's one session
  if (!isPostgresBackend(name)) return db;
  await db.raw(`ALTER DATABASE ${new URL(database.config.DATABASE_URL as string).pathname.slice(1)} SET default_transaction_read_only = on`);
  await db.destroy();
  return openDb(database.config);
}

/** A statement the server cuts short by its own time limit (MySQL, MariaDB and PostgreSQL each have one). */
async function cutShort(name: string, trx: Knex.Transaction): Promise<void> {
  const heavy = 'COUNT(*) FROM information_schema.columns a, information_schema.columns b, information_schema.columns c';
  if (isPostgresBackend(name)) {
    await trx.raw("SET LOCAL statement_timeout = '10ms'");
    await trx.raw('SELECT pg_sleep(1)');
    return;
  }
  const [[{ version }]] = (await trx.raw('SELECT VERSION() AS version')) as [[{ version: string }]];
  await trx.raw(version.includes('MariaDB') ? `SET STATEMENT max_statement_time = 0.01 FOR SELECT ${heavy}` : `SELECT /*+ MAX_EXECUTION_TIME(10) */ ${heavy}`);
}

describe.each(backends().filter(([name]) => name !== 'pgbouncer'))('a database that refuses writes (%s)', (name, backend) => {
  it('when it is read-only, then a transaction is 503 unavailable, not an internal error, and nothing is written', async () => {
    const database = await backend.create({ DB_POOL_SIZE: '1' });
    let db = openDb(database.config);
    try {
      // Named as rollcall's table: on SQLite a transaction claims the write lock by a write to it.
      await db.schema.createTable('batches', (t) => {
        t.string('id').primary();
      });
      db = await refusingWrites(name, database, db);
      await expect(inTransaction(db, { retries: 2 }, (trx) => trx('batches').insert({ id: 'a' }))).rejects.toMatchObject({ code: 'unavailable', status: 503 });
      expect(await db('batches').select('id')).toEqual([]);
    } finally {
      await db.destroy();
      await database.drop();
    }
  });
});

/**
 * Runs a transaction into a limit the server's operator set: PostgreSQL's temp_file_limit (53400,
 * configuration_limit_exceeded), MySQL/MariaDB's max_heap_table_size (1114, the table is full).
 */
async function overALimit(name: string, database: TestDatabase): Promise<unknown> {
  const db = openDb(database.config);
  try {
    return await inTransaction(db, { retries: 2 }, async (trx) => {
      if (isPostgresBackend(name)) {
        await trx.raw("SET LOCAL work_mem = '64kB'");
        await trx.raw("SET LOCAL temp_file_limit = '64kB'");
        await trx.raw('SELECT n FROM generate_series(1, 200000) AS n ORDER BY n DESC');
        return;
      }
      await trx.raw('SET SESSION max_heap_table_size = 16384');
      await trx.raw('CREATE TEMPORARY TABLE IF NOT EXISTS limited (n INT) ENGINE = MEMORY');
      await trx.raw('INSERT INTO limited SELECT 1 FROM information_schema.columns a, information_schema.columns b');
    });
  } finally {
    await db.destroy();
  }
}

describeOnServers('a statement the server cuts short (%s)', (name, backend) => {
  it("when a transaction meets a limit the server's operator set (a temp file limit, a table size limit), then it is 503 unavailable, not an internal error", async () => {
    const database = await backend.create();
    try {
      await expect(overALimit(name, database)).rejects.toMatchObject({ code: 'unavailable', status: 503 });
    } finally {
      await database.drop();
    }
  });

  it('when its own time limit ends a statement, then a transaction is 503 unavailable, not an internal error', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      await expect(inTransaction(db, { retries: 2 }, (trx) => cutShort(name, trx))).rejects.toMatchObject({ code: 'unavailable', status: 503 });
    } finally {
      await db.destroy();
      await database.drop();
    }
  });
});

/**
 * Errors the servers raise in situations a test cannot stage here (a Galera node losing the cluster
 * at COMMIT, ProxySQL without a writer, MySQL Group Replication, PostgreSQL 17's
 * transaction_timeout), raised by the server itself with the same number or SQLSTATE.
 */
const RAISED: Record<'mysql' | 'pg', Array<[what: string, code: string]>> = {
  mysql: [
    ['Galera: COMMIT failed after the node left the cluster', '1180'],
    ['ProxySQL: no writer reachable', '9001'],
    ['Group Replication: the member cannot commit', '3100'],
    ['Group Replication: a certification conflict at COMMIT (retried, then 503)', '3101'],
    // Connection-loss errors a proxy or MariaDB answers as an error packet, which mysql2 does not mark fatal.
    ['MariaDB or MaxScale: the connection was killed', '1927'],
    ['ProxySQL: the backend went away during the query', '2013'],
    ['ProxySQL: the server has gone away', '2006'],
    ['the server aborted the connection', '1152'],
    ['a network read or write failed in the server', '1158'],
    ['a network read was interrupted in the server', '1159'],
    ['a network write failed in the server', '1160'],
    ['a network write was interrupted in the server', '1161'],
  ],
  pg: [['PostgreSQL 17: transaction_timeout', '25P04']],
};

describeOnServers('a database whose network cannot be reached (%s)', (_name, backend) => {
  it('when a connection cannot even be attempted (no route: ENETUNREACH), then a transaction is 503 unavailable, not an internal error', async () => {
    const database = await backend.create();
    const url = new URL(database.config.DATABASE_URL!);
    url.hostname = '224.0.0.1'; // multicast: the kernel has no route for a connection there
    const db = openDb({ ...database.config, DATABASE_URL: url.toString() });
    try {
      await expect(inTransaction(db, { retries: 1 }, (trx) => trx.raw('SELECT 1'))).rejects.toMatchObject({ code: 'unavailable', status: 503 });
    } finally {
      await db.destroy();
      await database.drop();
    }
  });
});

const raise = (name: string, code: string, message: string): string =>
  isPostgresBackend(name)
    ? `DO $$ BEGIN RAISE EXCEPTION '${message}' USING ERRCODE = '${code}'; END $$`
    : `SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = ${code}, MESSAGE_TEXT = '${message}'`;

describeOnServers('errors the server answers for its own state (%s)', (name, backend) => {
  let database: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    database = await backend.create();
    db = openDb(database.config);
  });
  afterAll(async () => {
    await db.destroy();
    await database.drop();
  });

  it.each(RAISED[isPostgresBackend(name) ? 'pg' : 'mysql'])(
    'when it answers %s (%s), then a transaction is 503 unavailable, not an internal error',
    async (what, code) => {
      await expect(inTransaction(db, { retries: 1 }, (trx) => trx.raw(raise(name, code, what)))).rejects.toMatchObject({ code: 'unavailable', status: 503 });
    },
  );
});
