import { Knex } from 'knex';
import { Db, openDb } from '../../src/store/db';
import { runInOrder } from '../../src/store/statements';
import { inTransaction } from '../../src/store/transaction';
import { migrateLatest } from '../../src/store/migrations';
import { backends, TestDatabase } from '../helpers/backends';

describe.each(backends())('statements sent together (%s)', (_name, backend) => {
  let database: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    database = await backend.create();
    db = openDb(database.config);
    await migrateLatest(db); // the service's schema too: SQLite transactions claim the write lock through it
    await db.schema.createTable('scratch', (t) => {
      t.string('id').primary();
      t.integer('n').notNullable();
    });
  });
  beforeEach(() => db('scratch').delete());
  afterAll(async () => {
    await db.destroy();
    await database.drop();
  });

  const run = <T>(work: (trx: Knex.Transaction) => Promise<T>) => inTransaction(db, { retries: 0 }, work);

  it('when several statements run together, then they run in order and each result comes back in its place', async () => {
    const results = await run((trx) =>
      runInOrder(trx, [
        trx('scratch').insert([{ id: 'a', n: 1 }, { id: 'b', n: 2 }]),
        trx('scratch').where({ id: 'a' }).update({ n: 10 }),
        trx('scratch').select('id', 'n').orderBy('id'),
        trx('scratch').select('id').where('n', '>', 5),
      ]),
    );
    expect(results).toHaveLength(4);
    expect((results[2] as Array<{ id: string; n: number }>).map((r) => [r.id, Number(r.n)])).toEqual([['a', 10], ['b', 2]]);
    expect((results[3] as Array<{ id: string }>).map((r) => r.id)).toEqual(['a']);
  });

  it('when one statement runs alone, then its rows come back as the only result', async () => {
    await db('scratch').insert({ id: 'a', n: 1 });
    const results = await run((trx) => runInOrder(trx, [trx('scratch').select('id')]));
    expect(results).toHaveLength(1);
    expect((results[0] as Array<{ id: string }>).map((r) => r.id)).toEqual(['a']);
  });

  it('when a value holds SQL, then it is stored as a value, not run', async () => {
    const hostile = "x'; DELETE FROM scratch; --";
    await db('scratch').insert({ id: 'keep', n: 1 });
    await run((trx) => runInOrder(trx, [trx('scratch').insert({ id: hostile, n: 2 }), trx('scratch').where({ id: hostile }).update({ n: 3 })]));
    const rows = await db('scratch').select('id', 'n').orderBy('id');
    expect(rows.map((r) => [r.id, Number(r.n)])).toEqual([['keep', 1], [hostile, 3]]);
  });

  it('when a later statement fails, then the transaction fails and the earlier ones are undone', async () => {
    await db('scratch').insert({ id: 'a', n: 1 });
    const failure = await run((trx) => runInOrder(trx, [trx('scratch').where({ id: 'a' }).update({ n: 99 }), trx('scratch').insert({ id: 'a', n: 2 })])).then(
      () => null,
      (error: unknown) => error as Error,
    );
    expect(failure?.message).toMatch(/UNIQUE constraint|Duplicate entry/);
    expect((await db('scratch').select('n').where({ id: 'a' })).map((r) => Number(r.n))).toEqual([1]);
  });
});
