import { Knex } from 'knex';

import { Migration, migrations } from '../../migrations';
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
  if (await nothingPending(db)) return [];
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
 * True when the migrations table exists and lists every migration: a replica's usual start, which
 * then takes no lock. (It took the lock every time: one killed while holding it kept every replica
 * from starting for the lock's stale time, 2 minutes.) Any doubt, and the locked path decides.
 */
async function nothingPending(db: Db): Promise<boolean> {
  try {
    return (await db.schema.hasTable(migratorConfig.tableName as string)) && (await migrationsCurrent(db));
  } catch {
    return false;
  }
}

/** Rolls back every migration (tests only: there is no down-migration command). */
export async function migrateRollbackAll(db: Db): Promise<void> {
  await db.migrate.rollback(migratorConfig, true);
}

/** True when every known migration has been applied. */
export async function migrationsCurrent(db: Db): Promise<boolean> {
  const [, pending] = (await db.migrate.list(migratorConfig)) as [unknown[], unknown[]];
  return pending.length === 0;
}
