import express, { Express, NextFunction, Request, RequestHandler, Response } from 'express';
import type { Logger } from 'pino';

import type { TokenEntry } from '../config';
import { RouteNotFoundError } from '../domain/errors';
import type { Metrics } from '../metrics';
import { CompletionWatcher } from '../service/completionWatcher';
import { ServiceDeps } from '../service/deps';
import { SweepResult } from '../service/sweep';
import type { ProbePool } from '../store/db';
import { authenticate } from './auth';
import { refuseCrossSite } from './crossSite';
import { errorHandler } from './errorHandler';
import { requireHostOnHttp11, requireUnrebindableHost } from './hostCheck';
import { httpMetrics } from './httpMetrics';
import { strictQuery } from './params';
import { requestContext } from './requestContext';
import { readJsonBody, requireJsonBody } from './requireJson';
import { ackHandlers, SubmitAck } from './routes/acks';
import { adminRoutes } from './routes/admin';
import { batchRoutes } from './routes/batches';
import { dashboardRoutes } from './routes/dashboard';
import { eventRoutes } from './routes/events';
import { healthRoutes } from './routes/health';
import { itemRoutes } from './routes/items';
import { metaRoutes } from './routes/meta';
import { waitRoutes } from './routes/wait';
import { whoamiRoutes } from './routes/whoami';

export interface AppDeps {
  service: ServiceDeps;
  /** Where the readiness probe reaches the database (probePool). */
  probes: ProbePool;
  watcher: CompletionWatcher;
  sweepNow: () => Promise<SweepResult>;
  submitAck: SubmitAck;
  bodyLimit: string;
  log: Logger;
  tokens: TokenEntry[] | null;
  /** Counts each tenant's API requests (TENANT_RATE_LIMIT); null when unlimited. */
  tenantRate: RequestHandler | null;
  metrics: Metrics;
  /** /metrics and /openapi.json answer without a token (else they need an admin token). */
  publicMetrics: boolean;
  publicOpenapi: boolean;
  /** Without tokens: which Host names are served (requireUnrebindableHost); null with tokens. */
  hostCheck: { boundToLoopback: boolean; allowed: readonly string[] } | null;
}

/** Builds the express app; listening, signals and loops belong to main.ts. */
export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', strictQuery);
  const everyRequest = [
    requestContext(app, deps.log),
    notSniffed,
    httpMetrics(deps.metrics),
    requireHostOnHttp11,
    ...(deps.hostCheck ? [requireUnrebindableHost(deps.hostCheck.boundToLoopback, deps.hostCheck.allowed)] : []),
  ];
  // A form's content type is refused (415) before its origin is asked: the cross-site check is for the
  // bodiless writes no content-type rule catches.
  // The rate limit counts what passed the cheap refusals, before a body is read.
  const apiRequest = [
    authenticate(deps.tokens),
    requireJsonBody,
    ...(deps.tokens ? [] : [refuseCrossSite()]),
    ...(deps.tenantRate ? [deps.tenantRate] : []),
    readJsonBody(deps.bodyLimit),
  ];
  // The hottest route first, its whole chain as handlers of one route: a one-ID ack then runs them in
  // a single route dispatch instead of walking the router's layer stack once per middleware.
  app.post('/v1/acks', ...everyRequest, ...apiRequest, ...ackHandlers(deps.submitAck));
  app.use(everyRequest);
  app.use('/v1', answersNotStored, apiRequest);
  // Answered to an admin token where not public: kept by no cache on the way, as /v1's answers.
  app.use(['/metrics', '/openapi.json'], answersNotStored);
  // No route takes OPTIONS (there is no CORS: cross-site calls are refused). Without this, each
  // routes module's router answered it by itself, 200 text/plain with the methods it has, where
  // every other method no route takes is a 404 in the error shape.
  app.use((req, _res, next) => next(req.method === 'OPTIONS' ? new RouteNotFoundError(`no route for OPTIONS ${req.path}`) : undefined));
  app.use(batchRoutes(deps.service));
  app.use(itemRoutes(deps.service));
  app.use(whoamiRoutes());
  app.use(waitRoutes(deps.watcher));
  app.use(eventRoutes(deps.service));
  app.use(adminRoutes(deps.sweepNow));
  app.use(healthRoutes(deps.probes));
  app.use(metaRoutes(deps));
  app.use(dashboardRoutes());
  app.use((req, _res, next) => next(new RouteNotFoundError(`no route for ${req.method} ${req.path}`)));
  app.use(errorHandler());
  return app;
}

/** No answer is read by a browser as another type than it says (a JSON error taken for a script or a page). */
function notSniffed(_req: Request, res: Response, next: NextFunction): void {
  res.setHeader('x-content-type-options', 'nosniff');
  next();
}

/**
 * A read's answer (tenant metadata, failure reasons) is not kept in the browser's cache, where the
 * next user of a shared screen could find it. Writes are not cached by browsers; acks skip this.
 */
function answersNotStored(req: Request, res: Response, next: NextFunction): void {
  if (req.method === 'GET' || req.method === 'HEAD') res.setHeader('cache-control', 'no-store');
  next();
}
