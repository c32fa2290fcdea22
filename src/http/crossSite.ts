import type { RequestHandler } from 'express';

import { ForbiddenError } from '../domain/errors';

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
 * catches, and an `<img>` a GET. Browsers say where such a request comes from (`Origin`,
 * `Sec-Fetch-Site`); one whose origin is another site is refused, reads too: without CORS a page of
 * another site cannot see the answer, so no use of the service needs them, and each one spent the
 * one rate-limit budget every caller shares there (TENANT_RATE_LIMIT), the user's own dashboard
 * then answered 429. curl and server-side clients send neither header; an address typed or
 * bookmarked is `Sec-Fetch-Site: none`.
 */
export function refuseCrossSite(): RequestHandler {
  return (req, _res, next) => {
    const site = req.headers['sec-fetch-site'];
    const origin = req.headers.origin;
    if (site === 'cross-site' || site === 'same-site' || (origin !== undefined && !sameOrigin(origin, req.headers.host))) {
      return next(new ForbiddenError('a request from another site is not served by a service without API_TOKENS'));
    }
    next();
  };
}
