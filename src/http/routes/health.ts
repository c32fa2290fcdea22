import { Router } from 'express';

import { NewerSchemaError, UnavailableError } from '../../domain/errors';
import { Db, ping } from '../../store/db';
import { ensureSchemaWritable, schemaState, unknownMigrations } from '../../store/migrations';

/**
 * Liveness (the process runs) and readiness (the database answers, takes writes where it can tell,
 * and its schema is current). A database that is not ready is an UnavailableError, answered like
 * every other error (errorHandler.ts).
 */
export function healthRoutes(db: Db): Router {
  const router = Router();
  const readiness = oneAtATime(() => checkReady(db));
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (_req, res) => {
    await readiness();
    res.json({ status: 'ready' });
  });
  return router;
}

async function checkReady(db: Db): Promise<void> {
  await ping(db);
  const state = await schemaState(db).catch((cause: unknown) => {
    throw new UnavailableError('the database is not available', { cause });
  });
  if (state === 'behind') throw new UnavailableError('database migrations are not current');
  if (state === 'newer') throw new UnavailableError(new NewerSchemaError(await unknownMigrations(db).catch(() => [])).message);
  // After the schema: the check writes (nothing) to a table the schema has.
  await ensureSchemaWritable(db);
}

/**
 * Callers that arrive while a check runs share its outcome instead of starting their own: anyone may
 * ask /readyz, and a flood of probes then holds at most one of the pool's connections.
 */
function oneAtATime(check: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | null = null;
  return () =>
    (running ??= check().finally(() => {
      running = null;
    }));
}
