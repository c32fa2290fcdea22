import net from 'node:net';

import type { RequestHandler } from 'express';

import { InvalidRequestError, MisdirectedRequestError } from '../domain/errors';

/** Whether an address or name is this machine's loopback: localhost, 127.0.0.0/8, ::1. */
export function isLoopback(host: string): boolean {
  const name = host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (name === 'localhost' || name === '::1') return true;
  return net.isIPv4(name) && name.startsWith('127.');
}

/** The host name of a Host header (`name`, `name:port`, `[v6]`, `[v6]:port`), lower-cased. */
function hostnameOf(header: string): string {
  if (header.startsWith('[')) return header.slice(0, header.indexOf(']') + 1).toLowerCase();
  const colon = header.lastIndexOf(':');
  return (colon === -1 ? header : header.slice(0, colon)).toLowerCase();
}

/**
 * A name no web page can rebind to this service: an address (`10.0.0.5`, `[fd00::1]`: no DNS in
 * between), `localhost` or a name under `.localhost` (browsers keep them on loopback), or a name of
 * one label (`rollcall`, a container's service name: a public DNS name an attacker holds has a dot).
 */
function unrebindable(name: string): boolean {
  const bare = name.replace(/^\[(.*)\]$/, '$1');
  return net.isIP(bare) !== 0 || bare === 'localhost' || bare.endsWith('.localhost') || (bare !== '' && !bare.includes('.'));
}

/**
 * A token-less service trusts whoever reaches it, so it serves only requests that name it in a way
 * a web page elsewhere cannot: a page that rebinds its own DNS name (`evil.example`) to this
 * service's address is same-origin to it, and would read and change every batch. Refused with 421
 * before any route runs. Bound to loopback, only loopback names (API.md); bound beyond it,
 * addresses, `localhost` and one-label names, and the names in `allowed` (ALLOWED_HOSTS).
 */
export function requireUnrebindableHost(boundToLoopback: boolean, allowed: readonly string[]): RequestHandler {
  const listed = new Set(allowed.map((name) => name.toLowerCase()));
  const served = (hostname: string) => {
    if (boundToLoopback) return isLoopback(hostname);
    const name = hostname.replace(/\.$/, ''); // `example.com.` is `example.com`
    return unrebindable(name) || listed.has(name);
  };
  const refusal = boundToLoopback
    ? 'this service answers only requests addressed to localhost, 127.0.0.1 or [::1]'
    : 'this service has no API_TOKENS: it answers only requests addressed to an IP address, localhost, a one-label name or a name in ALLOWED_HOSTS';
  return (req, _res, next) => {
    const host = req.headers.host;
    // Bound beyond loopback, a request without a Host (an HTTP/1.0 health check) names no site: a
    // browser always sends one.
    if (host === undefined ? !boundToLoopback : served(hostnameOf(host))) return next();
    next(new MisdirectedRequestError(refusal));
  };
}

/**
 * HTTP/1.1 requires a Host (RFC 9112 §3.2): a request without one is 400 in the API's error shape,
 * with its x-request-id, and counted. Node's own refusal (its requireHostHeader, off in server.ts)
 * answered with an empty body, past every metric. HTTP/1.0 needs none (a bare health check).
 */
export const requireHostOnHttp11: RequestHandler = (req, _res, next) => {
  const http11 = req.httpVersionMajor > 1 || (req.httpVersionMajor === 1 && req.httpVersionMinor >= 1);
  next(http11 && req.headers.host === undefined ? new InvalidRequestError('an HTTP/1.1 request must name its host in a Host header') : undefined);
};
