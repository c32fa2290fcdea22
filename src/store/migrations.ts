import { Knex } from 'knex';

import { Migration, migrations } from '../../migrations';
import { NewerSchemaError } from '../domain/errors';
import { advisoryMigrationLock, Db, withoutQueryTimeout } from './db';
import { withMigrationLock } from './migrationLock';

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

const migratorConfig: Knex.MigratorConfig = { migrationSource: new ListMigrationSource(), tableName: 'rollcall_migrations' };

/**
 * Applies every pending migration; returns the names applied. Safe to run from several replicas at
 * once, on different Galera nodes too: they take turns under the cluster-wide migration lock (knex's
 * own lock would fail the second one), and whoever comes later finds nothing left to apply.
 */
export async function migrateLatest(db: Db): Promise<string[]> {
  const state = await stateWithoutLock(db);
  if (state === 'current') return [];
  if (state === 'newer') throw new NewerSchemaError(await unknownMigrations(db));
  // PostgreSQL: an advisory lock first (concurrent CREATE TABLE of the lock table would collide);
  // then, everywhere, the lock-table row that Galera certification serialises across nodes.
  return withoutQueryTimeout(db, (unlimited) =>
    advisoryMigrationLock(unlimited, () =>
      withMigrationLock(unlimited, async () => {
        const [, applied] = (await unlimited.migrate.latest(migratorConfig)) as [number, string[]];
        return applied;
      }),
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
    return (await db.schema.hasTable(migratorConfig.tableName as string)) ? await schemaState(db) : null;
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
  const [completed, pending] = await listMigrations(db);
  if (pending.length > 0) return 'behind';
  return unknownOf(completed).length > 0 ? 'newer' : 'current';
}

/** The applied migrations this version does not know. */
export async function unknownMigrations(db: Db): Promise<string[]> {
  return unknownOf((await listMigrations(db))[0]);
}

const KNOWN = new Set(migrations.map(([name]) => name));
const unknownOf = (completed: Array<{ name: string }>) => completed.map(({ name }) => name).filter((name) => !KNOWN.has(name));

/** Applied and pending migrations, without knex's check that every applied one is known (it throws). */
async function listMigrations(db: Db): Promise<[Array<{ name: string }>, unknown[]]> {
  return (await db.migrate.list({ ...migratorConfig, disableMigrationsListValidation: true })) as [Array<{ name: string }>, unknown[]];
}
