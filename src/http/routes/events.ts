import { Router } from 'express';

import { ServiceDeps } from '../../service/deps';
import { listEvents } from '../../service/listEvents';
import { requireScope } from '../auth';
import { batchIdOf } from '../params';

/** GET …/events: a batch's callback events and their delivery state. */
export function eventRoutes(service: ServiceDeps): Router {
  const router = Router();
  router.get('/v1/batches/:batchId/events', requireScope('read'), async (req, res) => {
    res.json({ events: await listEvents(service, req.caller, batchIdOf(req)) });
  });
  return router;
}
