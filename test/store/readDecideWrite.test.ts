import knex from 'knex';

import { Db, openDb, Queryable } from '../../src/store/db';
import { forUpdate } from '../../src/store/dialect';
import { migrateLatest } from '../../src/store/migrations';
import { readDecideWrite } from '../../src/store/readDecideWrite';
import { backends, TestDatabase } from '../helpers/backends';

type Row = { id: string; n: number | string };
const rowsOf = (result: unknown) => (result as Row[]).map((r) => [r.id, Number(r.n)]);

describe.each(backends())('read-decide-write transactions (%s)', (name, backend) => {
  let database: TestDatabase;
  let db: Db;
  /** A second client on the same database: it sees only what was committed. */
  let other: Db;
  beforeAll(async () => {
    // One pooled connection: a transaction left open on it would show in the next test.
    database = await backend.create({ DB_POOL_SIZE: '1' });
    db = openDb(database.config);
    if (name === 'mysql') other = knex({ client: 'mysql2', connection: { uri: database.config.DATABASE_URL } as never, pool: { min: 0, max: 1 } });
    else if (name === 'pg' || name === 'pgbouncer') other = knex({ client: 'pg', connection: database.config.DATABASE_URL, pool: { min: 0, max: 1 } });
    else other = db;
    await migrateLatest(db); // the service's schema too: SQLite transactions claim the write lock through it
    await db.schema.createTable('scratch', (t) => {
      t.string('id').primary();
      t.integer('n').notNullable();
    });
  });
  beforeEach(() => db('scratch').delete());
  afterAll(async () => {
    if (other !== db) await other.destroy();
    await db.destroy();
    await database.drop();
  });

  const scratch = (q: Queryable) => q('scratch');
  const committed = async () => rowsOf(await other('scratch').select('id', 'n').orderBy('id'));

  it('when a transaction runs, then decide sees every read in order and its writes are committed', async () => {
    await db('scratch').insert([
      { id: 'a', n: 1 },
      { id: 'b', n: 2 },
    ]);
    const answer = await readDecideWrite(
      db,
      { retries: 0 },
      {
        reads: (q) => [scratch(q).select('id', 'n').orderBy('id'), scratch(q).select('id', 'n').where('n', '>', 1)],
        decide: (q, results) => ({
          writes: [scratch(q).where({ id: 'a' }).update({ n: 10 }), scratch(q).insert({ id: 'c', n: results.length })],
          answer: results.map(rowsOf),
        }),
      },
    );
    expect(answer).toEqual([
      [
        ['a', 1],
        ['b', 2],
      ],
      [['b', 2]],
    ]);
    expect(await committed()).toEqual([
      ['a', 10],
      ['b', 2],
      ['c', 2],
    ]);
  });

  it('when it has one read and no writes, then the read comes back as the only result', async () => {
    await db('scratch').insert({ id: 'a', n: 1 });
    const answer = await readDecideWrite(
      db,
      { retries: 0 },
      { reads: (q) => [scratch(q).select('id', 'n')], decide: (_q, results) => ({ writes: [], answer: results }) },
    );
    expect(answer.map(rowsOf)).toEqual([[['a', 1]]]);
  });

  it('when a value holds SQL, then it is stored as a value, not run', async () => {
    const hostile = "x'; DELETE FROM scratch; --";
    await db('scratch').insert({ id: 'keep', n: 1 });
    await readDecideWrite(
      db,
      { retries: 0 },
      {
        reads: (q) => [scratch(q).select('id').where({ id: hostile })],
        decide: (q) => ({ writes: [scratch(q).insert({ id: hostile, n: 2 }), scratch(q).where({ id: hostile }).update({ n: 3 })], answer: null }),
      },
    );
    expect(await committed()).toEqual([
      ['keep', 1],
      [hostile, 3],
    ]);
  });

  it('when a later write fails, then earlier ones are undone and the connection serves the next one', async () => {
    await db('scratch').insert({ id: 'a', n: 1 });
    const failure = await readDecideWrite(
      db,
      { retries: 0 },
      {
        reads: (q) => [scratch(q).select('id').where({ id: 'a' })],
        decide: (q) => ({ writes: [scratch(q).where({ id: 'a' }).update({ n: 99 }), scratch(q).insert({ id: 'a', n: 2 })], answer: null }),
      },
    ).then(
      () => null,
      (error: unknown) => error as Error,
    );
    expect(failure?.message).toMatch(/UNIQUE constraint|Duplicate entry|duplicate key value/);
    expect(await committed()).toEqual([['a', 1]]);
    // The pool's one connection must not still be inside the failed transaction: this write has to be committed for others to see.
    await db('scratch').insert({ id: 'b', n: 2 });
    expect(await committed()).toEqual([
      ['a', 1],
      ['b', 2],
    ]);
  });

  it('when decide throws, then nothing is written and the rows it read are free again', async () => {
    await db('scratch').insert({ id: 'a', n: 1 });
    const failure = await readDecideWrite<null>(
      db,
      { retries: 0 },
      {
        reads: (q) => [forUpdate(q, scratch(q).select('id').where({ id: 'a' }))],
        decide: () => {
          throw new Error('decided to fail');
        },
      },
    ).catch((error: unknown) => error as Error);
    expect(failure?.message).toBe('decided to fail');
    // Another client takes the row lock within a second (one still held would make it time out).
    await other.transaction(async (trx) => {
      if (name === 'mysql') await trx.raw('SET SESSION innodb_lock_wait_timeout = 1');
      if (name === 'pg' || name === 'pgbouncer') await trx.raw("SET LOCAL lock_timeout = '1s'");
      await forUpdate(trx, trx('scratch').where({ id: 'a' })).update({ n: 5 });
    });
    expect(await committed()).toEqual([['a', 5]]);
  });

  it('when an attempt is aborted as a deadlock aborts it, then it runs again and commits once', async () => {
    await db('scratch').insert({ id: 'a', n: 1 });
    let attempts = 0;
    const retried: number[] = [];
    const answer = await readDecideWrite(
      db,
      { retries: 2, onRetry: (_error, attempt) => retried.push(attempt) },
      {
        reads: (q) => [forUpdate(q, scratch(q).select('id', 'n').where({ id: 'a' }))],
        decide: (q, [rows]) => {
          attempts += 1;
          if (attempts === 1)
            throw Object.assign(new Error('aborted'), {
              code: { mysql: 'ER_LOCK_DEADLOCK', pg: '40P01', pgbouncer: '40P01', citus: '40P01', sqlite: 'SQLITE_BUSY_SNAPSHOT' }[name],
            });
          return {
            writes: [
              scratch(q)
                .where({ id: 'a' })
                .update({ n: Number((rows as Row[])[0]!.n) + 1 }),
            ],
            answer: attempts,
          };
        },
      },
    );
    expect(retried).toEqual([1]);
    expect(answer).toBe(2);
    expect(await committed()).toEqual([['a', 2]]);
  });
});
