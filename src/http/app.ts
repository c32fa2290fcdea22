import express, { Express } from 'express';
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { pinoHttp } from 'pino-http';
import { RouteNotFoundError } from '../domain/errors';
import { ServiceDeps } from '../service/deps';
import { errorHandler } from './errorHandler';
import { ackRoutes, SubmitAck } from './routes/acks';
import { batchRoutes } from './routes/batches';
import { healthRoutes } from './routes/health';
import { lifecycleRoutes, LifecycleDeps } from './routes/lifecycle';

export interface AppDeps extends LifecycleDeps {
  service: ServiceDeps;
  submitAck: SubmitAck;
  bodyLimit: string;
  log: Logger;
}

const REQUEST_ID = /^[\w.-]{1,64}$/;

/** Builds the express app; listening, signals and loops belong to main.ts. */
export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(
    pinoHttp({
      logger: deps.log,
      genReqId(req, res) {
        const given = req.headers['x-request-id'];
        const id = typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
        res.setHeader('x-request-id', id);
        return id;
      },
      customLogLevel: (_req, res, err) => (err || res.statusCode >= 500 ? 'error' : 'debug'),
    }),
  );
  app.use(healthRoutes(deps.service.db));
  app.use(express.json({ limit: deps.bodyLimit }));
  app.use(batchRoutes(deps.service));
  app.use(ackRoutes(deps.submitAck));
  app.use(lifecycleRoutes(deps));
  app.use((req, _res, next) => next(new RouteNotFoundError(`no route for ${req.method} ${req.path}`)));
  app.use(errorHandler);
  return app;
}
