import net from 'node:net';

import type { RequestHandler } from 'express';

import { MisdirectedRequestError } from '../domain/errors';

/** Whether an address or name is this machine's loopback: localhost, 127.0.0.0/8, ::1. */
export function isLoopback(host: string): boolean {
  const name = host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (name === 'localhost' || name === '::1') return true;
  return net.isIPv4(name) && name.startsWith('127.');
}

/** The host name of a Host header (`name`, `name:port`, `[v6]`, `[v6]:port`). */
function hostnameOf(header: string): string {
  if (header.startsWith('[')) return header.slice(0, header.indexOf(']') + 1);
  const colon = header.lastIndexOf(':');
  return colon === -1 ? header : header.slice(0, colon);
}

/**
 * A token-less service bound to loopback trusts whoever reaches it, so only requests that name it
 * by a loopback Host are served. A page on another site that rebinds its own DNS name to 127.0.0.1
 * sends that name as Host and is refused with 421 before any route runs.
 */
export function requireLoopbackHost(): RequestHandler {
  return (req, _res, next) => {
    const host = req.headers.host;
    if (host !== undefined && isLoopback(hostnameOf(host))) return next();
    next(new MisdirectedRequestError('this service answers only requests addressed to localhost, 127.0.0.1 or [::1]'));
  };
}
