import type { RequestHandler } from 'express';
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';

declare module 'express-serve-static-core' {
  interface Request {
    /** This request's logger: every line carries its request id (and batchId where the route has one). */
    log: Logger;
    requestId: string;
  }
}

const REQUEST_ID = /^[\w.-]{1,64}$/;

/**
 * Gives every request an id (the caller's `x-request-id` when it is sane, else a new UUID), echoes
 * it, and a scoped logger made only when something logs — per-request child loggers would cost
 * more than a small ack itself. With LOG_LEVEL=debug each request is logged when it ends.
 */
export function requestContext(log: Logger): RequestHandler {
  const logRequests = log.isLevelEnabled('debug');
  return (req, res, next) => {
    const given = req.headers['x-request-id'];
    const requestId = typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    res.setHeader('x-request-id', requestId);
    req.requestId = requestId;
    let scoped: Logger | undefined;
    Object.defineProperty(req, 'log', {
      configurable: true,
      get: () => (scoped ??= log.child({ reqId: requestId, ...(req.params?.batchId ? { batchId: req.params.batchId } : {}) })),
    });
    if (logRequests) {
      const started = performance.now();
      res.on('finish', () => req.log.debug({ method: req.method, url: req.originalUrl, status: res.statusCode, ms: +(performance.now() - started).toFixed(2) }, 'request'));
    }
    next();
  };
}
