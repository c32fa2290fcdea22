import { Router } from 'express';

import { ServiceDeps } from '../../service/deps';
import { readItem } from '../../service/readItem';
import { requireAnyScope } from '../auth';

/** GET /v1/items/:itemId: what a worker asks before costly work (readers and consumers may). */
export function itemRoutes(deps: ServiceDeps): Router {
  const router = Router();
  router.get('/v1/items/:itemId', requireAnyScope('read', 'consume'), async (req, res) => {
    res.json(await readItem(deps, req.caller, String(req.params.itemId ?? '')));
  });
  return router;
}
