import { Router } from 'express';

import { SweepResult } from '../../service/sweep';
import { requireScope } from '../auth';

/** POST /v1/admin/sweep: runs the retention sweep now (admin scope). */
export function adminRoutes(sweepNow: () => Promise<SweepResult>): Router {
  const router = Router();
  router.post('/v1/admin/sweep', requireScope('admin'), async (_req, res) => {
    res.json(await sweepNow());
  });
  return router;
}
