import { RequestHandler, Router } from 'express';

import type { TokenEntry } from '../../config';
import type { Metrics } from '../../metrics';
import { authenticate, requireScope } from '../auth';
import { openApiDocument } from '../openapi';

export interface MetaDeps {
  metrics: Metrics;
  tokens: TokenEntry[] | null;
  publicMetrics: boolean;
  publicOpenapi: boolean;
}

/** /metrics (Prometheus text) and /openapi.json; each open, or admin-only when configured so. */
export function metaRoutes(deps: MetaDeps): Router {
  const router = Router();
  const adminOnly: RequestHandler[] = [authenticate(deps.tokens), requireScope('admin')];
  const guard = (open: boolean) => (open ? [] : adminOnly);
  const document = openApiDocument();

  router.get('/metrics', ...guard(deps.publicMetrics), async (_req, res) => {
    res.type(deps.metrics.registry.contentType).send(await deps.metrics.registry.metrics());
  });
  router.get('/openapi.json', ...guard(deps.publicOpenapi), (_req, res) => {
    res.json(document);
  });
  return router;
}
