import { Router } from 'express';

import { UnavailableError } from '../../domain/errors';
import { Db, ping } from '../../store/db';
import { migrationsCurrent } from '../../store/migrations';

/**
 * Liveness (the process runs) and readiness (the database answers and its schema is current). A
 * database that is not ready is an UnavailableError, answered like every other error (errorHandler.ts).
 */
export function healthRoutes(db: Db): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (_req, res) => {
    await ping(db);
    const current = await migrationsCurrent(db).catch((cause: unknown) => {
      throw new UnavailableError('the database is not available', { cause });
    });
    if (!current) throw new UnavailableError('database migrations are not current');
    res.json({ status: 'ready' });
  });
  return router;
}
