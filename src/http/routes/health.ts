import { Router } from 'express';

import { NewerSchemaError, UnavailableError } from '../../domain/errors';
import { Db, ping, ProbePool } from '../../store/db';
import { ensureSchemaWritable, schemaState, unknownMigrations } from '../../store/migrations';

/**
 * Liveness (the process runs) and readiness (the database answers, takes writes where it can tell,
 * and its schema is current). A database that is not ready is an UnavailableError, answered like
 * every other error (errorHandler.ts).
 */
export function healthRoutes(probes: ProbePool): Router {
  const router = Router();
  const readiness = shared(() => checkReady(probes.db), probes.mostChecks);
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

/** How long probes join a check under way; past it one is left to finish alone (a connection that stopped answering). */
const SHARED_FOR_MS = 1_000;
/**
 * Probes that arrive while a check runs share its outcome instead of starting their own: anyone may
 * ask /readyz, and a flood of probes then holds at most `mostChecks` of the pool's connections. A
 * check still running after SHARED_FOR_MS (stuck on a connection that stopped answering, until
 * DB_QUERY_TIMEOUT or for good) no longer takes the probes that come after it: they start another.
 */
function shared(check: () => Promise<void>, mostChecks: number): () => Promise<void> {
  let newest: { outcome: Promise<void>; startedAt: number } | null = null;
  let running = 0;
  return () => {
    const now = performance.now();
    if (newest && (now - newest.startedAt < SHARED_FOR_MS || running >= mostChecks)) return newest.outcome;
    running += 1;
    const outcome: Promise<void> = check().finally(() => {
      running -= 1;
      if (newest?.outcome === outcome) newest = null;
    });
    newest = { outcome, startedAt: now };
    return outcome;
  };
}
