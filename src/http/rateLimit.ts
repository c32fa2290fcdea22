import type { RequestHandler } from 'express';
import { MemoryStore, rateLimit } from 'express-rate-limit';

import { RateLimitedError } from '../domain/errors';

/** TENANT_RATE_LIMIT requests per TENANT_RATE_WINDOW, per tenant and process. */
export interface TenantRate {
  requests: number;
  windowMs: number;
}

export interface TenantRateLimiter {
  /** Runs after authentication: it counts by the caller's tenant. */
  handler: RequestHandler;
  /** Stops the window's reset timer. */
  close(): void;
}

/**
 * Counts each tenant's API requests to this process in fixed windows (express-rate-limit's memory
 * store); past the limit a request is `429 rate_limited`, with Retry-After until the window ends
 * and the draft-7 `RateLimit` headers on every answer. Per process, as WAIT_MAX is: N replicas take
 * N times the limit, which no shared store would avoid without a round trip per request.
 */
export function tenantRateLimiter(rate: TenantRate): TenantRateLimiter {
  const store = new MemoryStore();
  const handler = rateLimit({
    windowMs: rate.windowMs,
    limit: rate.requests,
    store,
    keyGenerator: (req) => req.caller.tenant,
    standardHeaders: 'draft-7',
    legacyHeaders: false,
    handler: (_req, res, next) => {
      // express-rate-limit gives the seconds left in the window, 0 in its last moment: ask for one at least.
      res.setHeader('retry-after', String(Math.max(1, Number(res.getHeader('retry-after')) || 0)));
      next(
        new RateLimitedError(
          `this tenant sent this process ${rate.requests} requests within TENANT_RATE_WINDOW (${rate.windowMs} ms); try again after Retry-After`,
        ),
      );
    },
  });
  return { handler, close: () => store.shutdown() };
}
