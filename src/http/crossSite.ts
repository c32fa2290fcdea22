import type { RequestHandler } from 'express';

import { ForbiddenError } from '../domain/errors';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Whether the Origin header names this very service (scheme aside: the Host it was sent to). */
function sameOrigin(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host.toLowerCase();
  } catch {
    return false; // `null` (sandboxed frames, file: pages) and anything unreadable
  }
}

/**
 * A token-less service cannot tell its user's own calls from a page's: a cross-site `fetch` with
 * `mode: 'no-cors'` or `navigator.sendBeacon` sends a bodiless POST that no content-type rule
 * catches. Browsers say where such a request comes from (`Origin`, `Sec-Fetch-Site`); a write whose
 * origin is another site is refused. curl and server-side clients send neither header.
 */
export function refuseCrossSiteWrites(): RequestHandler {
  return (req, _res, next) => {
    if (SAFE_METHODS.has(req.method)) return next();
    const site = req.headers['sec-fetch-site'];
    const origin = req.headers.origin;
    if (site === 'cross-site' || site === 'same-site' || (origin !== undefined && !sameOrigin(origin, req.headers.host))) {
      return next(new ForbiddenError('a request from another site may not change anything on a service without API_TOKENS'));
    }
    next();
  };
}
