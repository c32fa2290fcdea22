import { Router } from 'express';

import { SweepResult } from '../../service/sweep';
import { requireScope } from '../auth';
import { noFieldsBody } from '../schemas';
import { parse } from '../validate';

/** POST /v1/admin/sweep: runs the retention sweep now (admin scope). */
export function adminRoutes(sweepNow: () => Promise<SweepResult>): Router {
  const router = Router();
  router.post('/v1/admin/sweep', requireScope('admin'), async (req, res) => {
    parse(noFieldsBody, req.body ?? {}, 'body'); // no fields: a typo'd option is refused, not ignored
    res.json(await sweepNow());
  });
  return router;
}
