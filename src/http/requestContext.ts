import { randomUUID } from 'node:crypto';

import type { Express, RequestHandler } from 'express';
import type { Logger } from 'pino';

declare module 'express-serve-static-core' {
  interface Request {
    /** This request's logger: every line carries its request id (and batchId where the route has one). */
    log: Logger;
    requestId: string;
  }
}

const REQUEST_ID = /^[\w.-]{1,64}$/;
const SCOPED = Symbol('scoped logger');

/**
 * Gives every request an id (the caller's `x-request-id` when it is sane, else a new UUID) and
 * echoes it. `req.log` is a getter on the app's request prototype that makes the scoped logger on
 * first use: a child logger per request would cost more than a small ack itself. With
 * LOG_LEVEL=debug each request is logged when it ends.
 */
export function requestContext(app: Express, log: Logger): RequestHandler {
  Object.defineProperty(app.request, 'log', {
    configurable: true,
    get(this: Express['request'] & { [SCOPED]?: Logger }) {
      return (this[SCOPED] ??= log.child({ reqId: this.requestId, ...(this.params?.batchId ? { batchId: this.params.batchId } : {}) }));
    },
  });
  const logRequests = log.isLevelEnabled('debug');
  return (req, res, next) => {
    const given = req.headers['x-request-id'];
    req.requestId = typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    res.setHeader('x-request-id', req.requestId);
    if (logRequests) {
      const started = performance.now();
      res.on('finish', () =>
        req.log.debug({ method: req.method, url: req.originalUrl, status: res.statusCode, ms: +(performance.now() - started).toFixed(2) }, 'request'),
      );
    }
    next();
  };
}
