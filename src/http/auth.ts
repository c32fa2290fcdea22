import { createHash, timingSafeEqual } from 'node:crypto';

import type { RequestHandler } from 'express';

import type { Scope, TokenEntry } from '../config';
import { Caller, OPEN_CALLER } from '../domain/batch';
import { ForbiddenError, UnauthorizedError } from '../domain/errors';
import { afterBody } from './requireJson';

declare module 'express-serve-static-core' {
  interface Request {
    /** The tenant this request acts for. */
    caller: Caller;
    /** The scopes its token grants (all of them when the service runs without tokens). */
    scopes: ReadonlySet<Scope>;
  }
}

const ALL_SCOPES: ReadonlySet<Scope> = new Set(['produce', 'consume', 'read', 'admin']);

interface KnownToken {
  digest: Buffer;
  caller: Caller;
  scopes: ReadonlySet<Scope>;
}

const digestOf = (token: string) => createHash('sha256').update(token).digest();

/**
 * Finds the bearer token among the configured ones. Every known token is compared, in constant
 * time over equal-length digests, so neither a token's length nor its position leaks through timing.
 */
function matcher(tokens: TokenEntry[]): (given: string) => KnownToken | null {
  const known: KnownToken[] = tokens.map((t) => ({ digest: digestOf(t.token), caller: { tenant: t.tenant }, scopes: new Set(t.scopes) }));
  return (given) => {
    const digest = digestOf(given);
    let found: KnownToken | null = null;
    for (const entry of known) if (timingSafeEqual(entry.digest, digest)) found = entry;
    return found;
  };
}

const BEARER = /^Bearer +(\S+)$/i;

/** Authenticates requests when tokens are configured; without tokens every request acts for tenant ''. */
export function authenticate(tokens: TokenEntry[] | null): RequestHandler {
  if (!tokens) {
    return (req, _res, next) => {
      req.caller = OPEN_CALLER;
      req.scopes = ALL_SCOPES;
      next();
    };
  }
  const find = matcher(tokens);
  return (req, _res, next) => {
    const header = req.get('authorization');
    const token = header ? BEARER.exec(header)?.[1] : undefined;
    const known = token ? find(token) : null;
    if (!known) return next(new UnauthorizedError(token ? 'unknown token' : 'this request needs Authorization: Bearer <token>'));
    req.caller = known.caller;
    req.scopes = known.scopes;
    next();
  };
}

/** Lets the request through when its token has `scope` (or `admin`, which grants everything), then reads its body. */
export function requireScope(scope: Scope): RequestHandler {
  return (req, _res, next) => {
    if (req.scopes.has(scope) || req.scopes.has('admin')) return afterBody(req, next);
    next(new ForbiddenError(`this token lacks the ${scope} scope`));
  };
}

/** Lets the request through when its token has any of `scopes` (or `admin`). */
export function requireAnyScope(...scopes: Scope[]): RequestHandler {
  return (req, _res, next) => {
    if (req.scopes.has('admin') || scopes.some((scope) => req.scopes.has(scope))) return afterBody(req, next);
    next(new ForbiddenError(`this token lacks the ${scopes.join(' or ')} scope`));
  };
}
