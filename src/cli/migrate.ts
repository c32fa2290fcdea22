import { loadConfig } from '../config';
import { toError } from '../domain/errors';
import { openDb } from '../store/db';
import { migrateLatest } from '../store/migrations';

/** `npm run migrate`: applies pending migrations to the configured database and exits. */
async function run(): Promise<void> {
  const db = openDb(loadConfig());
  try {
    const applied = await migrateLatest(db);
    process.stdout.write(applied.length ? `applied: ${applied.join(', ')}\n` : 'already current\n');
  } finally {
    await db.destroy();
  }
}

run().catch((caught: unknown) => {
  process.stderr.write(`${toError(caught).message}\n`);
  process.exit(1);
});
