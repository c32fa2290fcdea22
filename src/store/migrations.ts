import { Knex } from 'knex';

import { Migration, migrations } from '../../migrations';
import { NewerSchemaError } from '../domain/errors';
import { Db, ensureUnicode, ensureWritable, perTransactionSettings, unlessTheDatabaseFreezes, withoutQueryTimeout } from './db';
import { isBusy, isRetryable } from './dbErrors';
import { profileOf } from './dialect';
import { defaultMigrationLockOptions, whileBusy, withMigrationLock } from './migrationLock';

/** Feeds knex's migrator from the imported list, so the same code runs from TypeScript and from dist/. */
class ListMigrationSource implements Knex.MigrationSource<readonly [string, Migration]> {
  async getMigrations() {
    return [...migrations];
  }
  getMigrationName([name]: readonly [string, Migration]) {
    return name;
  }
  async getMigration([, migration]: readonly [string, Migration]) {
    return migration;
  }
}

const TABLE = 'rollcall_migrations';

const migratorConfig: Knex.MigratorConfig = { migrationSource: new ListMigrationSource(), tableName: TABLE };

/**
 * knex's migrator for `db`. It runs every pending migration in one transaction of its own making;
 * behind a pooler in transaction mode that transaction first sets what a session sets elsewhere
 * (perTransactionSettings: a DDL statement waits at most LOCK_TIMEOUT for a table's lock, as on a
 * session of the pool).
 */
function migratorOf(db: Db): Knex.MigratorConfig {
  const settings = perTransactionSettings(db);
  if (settings === null) return migratorConfig;
  // knex calls beforeAll in the migrations' transaction (Migrator.js `_runBatch`); its typings omit it.
  const withSettings: Knex.MigratorConfig & { beforeAll(trx: Knex): Promise<void> } = {
    ...migratorConfig,
    beforeAll: async (trx) => void (await trx.raw(settings)),
  };
  return withSettings;
}

/**
 * Applies every pending migration; returns the names applied. Safe to run from several replicas at
 * once, on different Galera nodes too: they take turns under the cluster-wide migration lock (knex's
 * own lock would fail the second one), and whoever comes later finds nothing left to apply. First it
 * refuses a database not in UTF-8 (ensureUnicode), so neither the service nor `rollcall migrate`
 * starts on one.
 */
export async function migrateLatest(db: Db): Promise<string[]> {
  await unlessTheDatabaseFreezes(db, 'its encoding was read', () => ensureUnicode(db));
  const state = await stateWithoutLock(db);
  if (state === 'current') return [];
  if (state === 'newer') throw new NewerSchemaError(await unknownMigrations(db));
  // Everywhere the lock-table row, which Galera certification serialises across nodes too.
  // Two connections at least: the lock row's refresh must not wait for the migrations' transaction.
  return unlessTheDatabaseFreezes(db, 'migrations ran', () =>
    withoutQueryTimeout(
      db,
      (unlimited) =>
        withMigrationLock(unlimited, async () => {
          // Ours is the only migrator now, so knex's own flag, if set, was left by one that died: on
          // MySQL/MariaDB the first DDL statement commits the flag with it, and a migrator killed
          // mid-migration (or one whose connection died before it could clear it) left it set, so
          // every later start failed "Migration table is already locked" until it was cleared by hand.
          const migrate = async () => {
            await unlimited.migrate.forceFreeMigrationsLock(migratorOf(unlimited));
            return ((await unlimited.migrate.latest(migratorOf(unlimited))) as [number, string[]])[1];
          };
          // SQLite: another process writing the file (an older service beside `rollcall migrate`);
          // where DDL is transactional, also a migration the database aborted (a deadlock): it
          // changed nothing, so it runs again (on MySQL/MariaDB its DDL may have committed already).
          // knex wraps a busy file met by its own lock flag's update in a MigrationLocked error
          // without the driver's code; under our lock, with that flag freed, nothing else gives one.
          // After a busy retry the names are those the last try applied (they are only logged).
          const { writers, transactionalDdl } = profileOf(unlimited);
          const busy = (error: unknown) =>
            isBusy(error) || (transactionalDdl && isRetryable(error)) || (writers === 'one-per-file' && (error as Error | null)?.name === 'MigrationLocked');
          return whileBusy(migrate, performance.now() + defaultMigrationLockOptions.waitMs, defaultMigrationLockOptions.pollMs, busy);
        }),
      { minConnections: 2 },
    ),
  );
}

/**
 * The schema's state when the migrations table exists (a replica's usual start, which then takes no
 * lock: it took the lock every time, and one killed while holding it kept every replica from
 * starting for the lock's stale time, 2 minutes). Any doubt (`null`), and the locked path decides.
 */
async function stateWithoutLock(db: Db): Promise<SchemaState | null> {
  try {
    return (await db.schema.hasTable(TABLE)) ? await schemaState(db) : null;
  } catch {
    return null;
  }
}

/** Rolls back every migration (tests only: there is no down-migration command). */
export async function migrateRollbackAll(db: Db): Promise<void> {
  await db.migrate.rollback(migratorConfig, true);
}

/** True when every known migration has been applied. */
export async function migrationsCurrent(db: Db): Promise<boolean> {
  return (await schemaState(db)) === 'current';
}

/**
 * `current`: every migration of this version applied, and no other; `behind`: some still to apply;
 * `newer`: applied migrations this version does not know (a newer version migrated the database).
 */
export type SchemaState = 'current' | 'behind' | 'newer';

export async function schemaState(db: Db): Promise<SchemaState> {
  const applied = await appliedMigrations(db);
  const done = new Set(applied);
  if (migrations.some(([name]) => !done.has(name))) return 'behind';
  return unknownOf(applied).length > 0 ? 'newer' : 'current';
}

/**
 * Readiness's check that the database takes this service's writes (db.ts ensureWritable), on the
 * migrations' own table: every schema has it, and no migration alters it.
 */
export const ensureSchemaWritable = (db: Db): Promise<void> => ensureWritable(db, TABLE);

/** The applied migrations this version does not know. */
export async function unknownMigrations(db: Db): Promise<string[]> {
  return unknownOf(await appliedMigrations(db));
}

const KNOWN = new Set(migrations.map(([name]) => name));
const unknownOf = (applied: string[]) => applied.filter((name) => !KNOWN.has(name));

/**
 * The names of the applied migrations, read from knex's table as it is. Not knex's `migrate.list`:
 * that creates knex's tables when one is missing, outside the migration lock, and a replica starting
 * while another had created only the first would add a second row to knex's lock table, after which
 * knex refuses every migration ("already locked").
 */
async function appliedMigrations(db: Db): Promise<string[]> {
  if (!(await db.schema.hasTable(TABLE))) return [];
  return ((await db(TABLE).select('name').orderBy('id')) as Array<{ name: string }>).map((row) => row.name);
}
