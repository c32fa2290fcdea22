import { Db, openDb } from '../../src/store/db';
import { profileOf } from '../../src/store/dialect';
import { migrateLatest, migrateRollbackAll, migrationsCurrent } from '../../src/store/migrations';
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
});
