import { spawn } from 'node:child_process';

import Database from 'better-sqlite3';

import { migrations } from '../../migrations';
import { Db, openDb } from '../../src/store/db';
import { profileOf } from '../../src/store/dialect';
import { withMigrationLock } from '../../src/store/migrationLock';
import { migrateLatest, migrateRollbackAll, migrationsCurrent, schemaState } from '../../src/store/migrations';
import { backends } from '../helpers/backends';

/** The schema as the database reports it: tables, columns with types, and indexes. */
async function describeSchema(db: Db): Promise<unknown> {
  if (profileOf(db).name === 'mysql') {
    const [columns] = await db.raw(
      `SELECT table_name t, column_name c, column_type ty, is_nullable n, column_default d, collation_name co FROM information_schema.columns
       WHERE table_schema = DATABASE() ORDER BY table_name, ordinal_position`,
    );
    const [indexes] = await db.raw(
      `SELECT table_name t, index_name i, seq_in_index s, column_name c FROM information_schema.statistics
       WHERE table_schema = DATABASE() ORDER BY table_name, index_name, seq_in_index`,
    );
    return { columns, indexes };
  }
  if (profileOf(db).name === 'postgres') {
    const columns = await db.raw(
      `SELECT table_name t, column_name c, data_type ty, character_maximum_length l, is_nullable n, column_default d FROM information_schema.columns
       WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`,
    );
    const indexes = await db.raw(
      `SELECT tablename t, indexname i, indexdef d FROM pg_indexes WHERE schemaname = current_schema() ORDER BY tablename, indexname`,
    );
    return { columns: columns.rows, indexes: indexes.rows };
  }
  return db.raw(`SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name`);
}

describe.each(backends())('migrations (%s)', (_name, backend) => {
  it('when migrated to latest, rolled back and migrated again, then the schema is the same', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      expect(await migrationsCurrent(db)).toBe(false);
      expect((await migrateLatest(db)).length).toBeGreaterThan(0);
      expect(await migrationsCurrent(db)).toBe(true);
      const first = await describeSchema(db);
      await migrateRollbackAll(db);
      expect(await migrationsCurrent(db)).toBe(false);
      await migrateLatest(db);
      expect(await describeSchema(db)).toEqual(first);
      expect(await migrateLatest(db)).toEqual([]);
    } finally {
      await db.destroy();
      await database.drop();
    }
  });

  it('when 0019 comes to an outbox with events, then those tried and still pending keep their creation as the start of their age', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      await migrateLatest(db);
      const m0019 = migrations.find(([name]) => name === '0019_outbox_first_attempt')![1];
      await m0019.down(db);
      const event = (id: string, status: string, attempts: number) => ({
        id,
        batch_id: '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
        tenant: '',
        host: 'h',
        event: 'batch.completed',
        url: 'http://h/',
        payload: '{}',
        status,
        attempts,
        next_attempt_at: 5,
        created_at: 1000 + attempts,
      });
      await db('outbox').insert([event('a', 'pending', 0), event('b', 'pending', 2), event('c', 'dead', 3), event('d', 'delivered', 1)]);
      await m0019.up(db);
      await m0019.up(db); // again, as after a run whose UPDATE failed once MySQL had committed its ALTER
      const rows = await db('outbox').select('id', 'first_attempt_at').orderBy('id');
      expect(rows.map((r: { id: string; first_attempt_at: unknown }) => [r.id, r.first_attempt_at === null ? null : Number(r.first_attempt_at)])).toEqual([
        ['a', null],
        ['b', 1002],
        ['c', null],
        ['d', null],
      ]);
    } finally {
      await db.destroy();
      await database.drop();
    }
  });

  it('when migrations run again and again beside other work, then each finishes at once: none waits for a lock a finished one left', async () => {
    // Behind a pooler in transaction mode a session's lock stays with the server session that took
    // it, which the pooler lends to whoever comes next; an unlock sent later may reach another one.
    const database = await backend.create();
    const db = openDb(database.config);
    const busy = openDb(database.config);
    let working = true;
    const work = Promise.all(
      Array.from({ length: 4 }, async () => {
        while (working) await busy.raw('select 1');
      }),
    );
    try {
      for (let run = 0; run < 6; run += 1) {
        const started = Date.now();
        const migrated = migrateLatest(db).then((applied) => applied.length);
        const late = new Promise<string>((resolve) => setTimeout(() => resolve('still waiting after 10 s'), 10_000).unref());
        expect(await Promise.race([migrated, late])).toBe(migrations.length);
        expect(Date.now() - started).toBeLessThan(10_000);
        if (profileOf(db).name === 'postgres') {
          const { rows } = await busy.raw(
            "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
          );
          expect(rows[0].n).toBe(0); // no advisory lock outlives its migration
        }
        await migrateRollbackAll(db);
      }
    } finally {
      working = false;
      await work;
      await busy.destroy();
      await db.destroy();
      await database.drop();
    }
  }, 120_000);

  it('when a replica reads the schema while another has created only the migrations table, then it creates no table of its own', async () => {
    // knex's migrate.list would create knex's lock table and its row here, outside the migration
    // lock: two such rows, and knex then refuses every migration ("already locked").
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      await db.schema.createTable('rollcall_migrations', (t) => {
        t.increments('id');
        t.string('name');
        t.integer('batch');
        t.timestamp('migration_time');
      });
      expect(await schemaState(db)).toBe('behind');
      expect(await db.schema.hasTable('rollcall_migrations_lock')).toBe(false);
      expect((await migrateLatest(db)).length).toBe(migrations.length);
      expect(await db('rollcall_migrations_lock').select('is_locked')).toEqual([{ is_locked: 0 }]);
    } finally {
      await db.destroy();
      await database.drop();
    }
  });

  it('when a newer version has migrated the database, then this version refuses to start, naming the migration it does not know', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      await migrateLatest(db);
      await db('rollcall_migrations').insert({ name: '9999_from_a_newer_version.ts', batch: 99, migration_time: new Date() });
      expect(await schemaState(db)).toBe('newer');
      await expect(migrateLatest(db)).rejects.toThrow(/schema is newer than this version of rollcall .*9999_from_a_newer_version/);
    } finally {
      await db.destroy();
      await database.drop();
    }
  });

  it('when three pools migrate a fresh database at once, then all succeed, each migration once', async () => {
    const database = await backend.create();
    const pools = [openDb(database.config), openDb(database.config), openDb(database.config)];
    try {
      // knex's own lock alone fails all but one of them ("Migration table is already locked").
      const applied = await Promise.all(pools.map((db) => migrateLatest(db)));
      expect(applied.flat().sort()).toEqual(migrations.map(([name]) => name).sort());
      for (const db of pools) expect(await migrationsCurrent(db)).toBe(true);
      // The lock is released: the next migrator does not wait.
      const started = Date.now();
      expect(await migrateLatest(pools[0] as Db)).toEqual([]);
      expect(Date.now() - started).toBeLessThan(2000);
    } finally {
      for (const db of pools) await db.destroy();
      await database.drop();
    }
  });

  it('when a crashed migrator left its lock row, then the next breaks it once stale and migrates', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      await withMigrationLock(db, async () => undefined); // creates the lock table
      await db('rollcall_migration_lock').insert({ id: 1, owner: 'crashed', refreshed_at: Date.now() - 10 * 60_000 });
      expect((await migrateLatest(db)).length).toBe(migrations.length);
      expect(await db('rollcall_migration_lock').select()).toEqual([]);
    } finally {
      await db.destroy();
      await database.drop();
    }
  });

  it("when a migrator died mid-migration with knex's own lock flag committed (MySQL's DDL commits it), then the next migrates", async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      await migrateLatest(db);
      await migrateRollbackAll(db); // pending migrations again, the migrations tables kept
      await db('rollcall_migrations_lock').update({ is_locked: 1 });
      expect((await migrateLatest(db)).length).toBe(migrations.length);
      expect(await migrationsCurrent(db)).toBe(true);
      expect((await db('rollcall_migrations_lock').select('is_locked')).map((row: { is_locked: unknown }) => Number(row.is_locked))).toEqual([0]);
    } finally {
      await db.destroy();
      await database.drop();
    }
  });

  it('when the schema is current and a replica killed while starting left a fresh lock row, then the next starts at once', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      await migrateLatest(db);
      await db('rollcall_migration_lock').insert({ id: 1, owner: 'killed while starting', refreshed_at: Date.now() });
      const started = Date.now();
      expect(await migrateLatest(db)).toEqual([]);
      expect(Date.now() - started).toBeLessThan(10_000); // not the lock's 2-minute stale time
    } finally {
      await db.destroy();
      await database.drop();
    }
  });

  it('when another holds the lock, then a migrator waits for it and gives up after its wait', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      let release = () => undefined as void;
      let acquired = () => undefined as void;
      const held = new Promise<void>((resolve) => (acquired = resolve));
      const holding = withMigrationLock(db, () => {
        acquired();
        return new Promise<void>((resolve) => (release = resolve));
      });
      await held;
      const options = { waitMs: 300, staleMs: 60_000, pollMs: 50 };
      await expect(withMigrationLock(db, async () => 'ran', options)).rejects.toThrow(/held the migration lock/);
      const waiting = withMigrationLock(db, async () => 'ran', { ...options, waitMs: 5000 });
      release();
      await holding;
      expect(await waiting).toBe('ran');
    } finally {
      await db.destroy();
      await database.drop();
    }
  });

  it('when a migration fails and the lock cannot be released either, then the migration’s own error is the one thrown', async () => {
    const database = await backend.create();
    const db = openDb(database.config);
    try {
      const failing = withMigrationLock(db, async () => {
        await db.schema.dropTable('rollcall_migration_lock'); // the release's delete fails now
        throw new Error('the migration failed');
      });
      await expect(failing).rejects.toThrow('the migration failed');
    } finally {
      await db.destroy();
      await database.drop();
    }
  });
});

/** A process that writes a SQLite file in turns, as a service would: the file is its argument. */
const WRITING_SERVICE = `
const db = new (require('better-sqlite3'))(process.argv[1], { timeout: 10000 });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
(async () => {
  for (const end = Date.now() + 3000; Date.now() < end; ) {
    db.exec('BEGIN IMMEDIATE');
    process.stdout.write('holding\\n');
    await sleep(60);
    db.exec('COMMIT');
    await sleep(10);
  }
  db.close();
})();
`;

describe('migrations on a SQLite file another process holds', () => {
  const sqlite = backends().find(([name]) => name === 'sqlite')![1];

  /** Another connection to the file takes its write lock, as another process would, and keeps it `ms`. */
  function holdTheFile(path: string, ms: number): Promise<void> {
    const other = new Database(path);
    other.exec('BEGIN IMMEDIATE');
    return new Promise((resolve) =>
      setTimeout(() => {
        other.exec('COMMIT');
        other.close();
        resolve();
      }, ms),
    );
  }

  /** Runs `test` on a new SQLite file (created), with a pool on it. */
  async function onANewFile(test: (db: Db, file: string) => Promise<void>): Promise<void> {
    const database = await sqlite.create();
    const db = openDb(database.config);
    try {
      await db.raw('select 1'); // the file exists
      await test(db, database.config.SQLITE_PATH);
    } finally {
      await db.destroy();
      await database.drop();
    }
  }

  it('when a new database is being written by another process, then a migrator waits for the file instead of failing busy', () =>
    onANewFile(async (db, file) => {
      const released = holdTheFile(file, 500);
      expect((await migrateLatest(db)).length).toBe(migrations.length);
      await released;
      expect(await migrationsCurrent(db)).toBe(true);
    }));

  it('when another process keeps writing the file (a running service beside `rollcall migrate`), then the migrations wait their turns', () =>
    onANewFile(async (db, file) => {
      // Another process (in this one, a hold that began during a migration's transaction would wait
      // for it synchronously, and never see it end): holds of 60 ms with gaps of 10 ms, for 3 s.
      const service = spawn(process.execPath, ['-e', WRITING_SERVICE, file], { stdio: ['ignore', 'pipe', 'inherit'] });
      const exited = new Promise((resolve) => service.once('exit', resolve));
      await new Promise((resolve) => service.stdout.once('data', resolve)); // its first hold began
      expect((await migrateLatest(db)).length).toBeGreaterThan(0);
      expect(await exited).toBe(0);
      expect(await migrationsCurrent(db)).toBe(true);
    }));

  it('when the file is held while the lock is taken and given back, then the lock waits for it', () =>
    onANewFile(async (db, file) => {
      await withMigrationLock(db, async () => undefined); // the lock table exists
      const options = { waitMs: 5000, staleMs: 60_000, pollMs: 50 };
      let released = holdTheFile(file, 300);
      expect(await withMigrationLock(db, async () => 'ran', options)).toBe('ran');
      await released;
      const again = withMigrationLock(
        db,
        async () => {
          released = holdTheFile(file, 300); // held when the lock is given back
          return 'ran again';
        },
        options,
      );
      expect(await again).toBe('ran again');
      await released;
      expect(await db('rollcall_migration_lock').select()).toEqual([]);
    }));
});
