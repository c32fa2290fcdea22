import express, { Express } from 'express';
import type { Logger } from 'pino';
import { RouteNotFoundError } from '../domain/errors';
import { ServiceDeps } from '../service/deps';
import { errorHandler } from './errorHandler';
import { ackHandlers, SubmitAck } from './routes/acks';
import { batchRoutes } from './routes/batches';
import { itemRoutes } from './routes/items';
import { whoamiRoutes } from './routes/whoami';
import { healthRoutes } from './routes/health';
import { lifecycleRoutes, LifecycleDeps } from './routes/lifecycle';
import { requestContext } from './requestContext';
import { authenticate } from './auth';
import type { TokenEntry } from '../config';
import type { Metrics } from '../metrics';
import { httpMetrics } from './httpMetrics';
import { requireJsonBody } from './requireJson';
import { metaRoutes } from './routes/meta';
import { dashboardRoutes } from './routes/dashboard';

export interface AppDeps extends LifecycleDeps {
  service: ServiceDeps;
  submitAck: SubmitAck;
  bodyLimit: string;
  log: Logger;
  tokens: TokenEntry[] | null;
  metrics: Metrics;
  /** /metrics and /openapi.json answer without a token (else they need an admin token). */
  publicMetrics: boolean;
  publicOpenapi: boolean;
}

/** Builds the express app; listening, signals and loops belong to main.ts. */
export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  const everyRequest = [requestContext(app, deps.log), httpMetrics(deps.metrics)];
  const apiRequest = [authenticate(deps.tokens), requireJsonBody, express.json({ limit: deps.bodyLimit })];
  // The hottest route first, its whole chain as handlers of one route: a one-ID ack then runs them in
  // a single route dispatch instead of walking the router's layer stack once per middleware.
  app.post('/v1/acks', ...everyRequest, ...apiRequest, ...ackHandlers(deps.submitAck));
  app.use(everyRequest);
  app.use('/v1', apiRequest);
  app.use(batchRoutes(deps.service));
  app.use(itemRoutes(deps.service));
  app.use(whoamiRoutes());
  app.use(lifecycleRoutes(deps));
  app.use(healthRoutes(deps.service.db));
  app.use(metaRoutes(deps));
  app.use(dashboardRoutes());
  app.use((req, _res, next) => next(new RouteNotFoundError(`no route for ${req.method} ${req.path}`)));
  app.use(errorHandler);
  return app;
}
