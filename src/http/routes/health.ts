import { Router } from 'express';
import { Db } from '../../store/db';
import { migrationsCurrent } from '../../store/migrations';
import { toError } from '../../domain/errors';

/** Liveness (the process runs) and readiness (the database answers and its schema is current). */
export function healthRoutes(db: Db): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (req, res) => {
    try {
      await db.raw('select 1');
      if (!(await migrationsCurrent(db))) {
        res.status(503).json({ error: { code: 'unavailable', message: 'database migrations are not current' } });
        return;
      }
      res.json({ status: 'ready' });
    } catch (caught) {
      req.log.warn({ err: toError(caught) }, 'readiness check failed');
      res.status(503).json({ error: { code: 'unavailable', message: 'the database is not available' } });
    }
  });
  return router;
}
