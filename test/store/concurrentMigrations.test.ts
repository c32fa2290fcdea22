import { openDb } from '../../src/store/db';
import { migrateLatest, migrationsCurrent } from '../../src/store/migrations';
import { backends, describeEachOrSkip } from '../helpers/backends';

// PostgreSQL alone, and behind PgBouncer: there two replicas creating one table at once collide.
const postgres = backends().filter(([name]) => name === 'pg' || name === 'pgbouncer');

describeEachOrSkip(postgres)('replicas migrating one fresh database at once (%s)', (_name, backend) => {
  it('when four replicas start together, then exactly one applies the migrations and all come up', async () => {
    const database = await backend.create();
    const replicas = Array.from({ length: 4 }, () => openDb(database.config));
    try {
      const applied = await Promise.all(replicas.map((db) => migrateLatest(db)));
      const appliers = applied.filter((names) => names.length > 0);
      expect(appliers).toHaveLength(1);
      for (const db of replicas) expect(await migrationsCurrent(db)).toBe(true);
    } finally {
      await Promise.all(replicas.map((db) => db.destroy()));
      await database.drop();
    }
  });
});
