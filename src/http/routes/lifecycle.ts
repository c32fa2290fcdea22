import { Router } from 'express';

import { CompletionWatcher } from '../../service/completionWatcher';
import { ServiceDeps } from '../../service/deps';
import { listEvents } from '../../service/listEvents';
import { SweepResult } from '../../service/sweep';
import { requireScope } from '../auth';
import { batchIdOf } from '../params';
import { waitQuery } from '../schemas';
import { parse } from '../validate';

export interface LifecycleDeps {
  service: ServiceDeps;
  watcher: CompletionWatcher;
  sweepNow: () => Promise<SweepResult>;
}

/** Waiting for completion, a batch's callback events, and the admin sweep. */
export function lifecycleRoutes(deps: LifecycleDeps): Router {
  const router = Router();

  router.get('/v1/batches/:batchId/wait', requireScope('read'), async (req, res) => {
    const { timeout } = parse(waitQuery, req.query, 'query');
    const abandoned = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) abandoned.abort();
    });
    res.json(await deps.watcher.wait(req.caller, batchIdOf(req), Math.round(timeout * 1000), abandoned.signal));
  });

  router.get('/v1/batches/:batchId/events', requireScope('read'), async (req, res) => {
    res.json({ events: await listEvents(deps.service, req.caller, batchIdOf(req)) });
  });

  router.post('/v1/admin/sweep', requireScope('admin'), async (_req, res) => {
    res.json(await deps.sweepNow());
  });

  return router;
}
