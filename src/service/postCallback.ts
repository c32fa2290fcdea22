import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';

import { CallbackTargetPolicy, hostnameOf } from '../domain/callbackTarget';

/**
 * One delivery attempt: resolves with null on a 2xx, else with what went wrong, in words that say
 * nothing about hosts other than the receiver (no port-scan oracle): `refused: private address`,
 * `timeout`, `http <status>` or `connection failed`.
 */
export type PostCallback = (url: string, headers: Record<string, string>, body: string, timeoutMs: number) => Promise<string | null>;

const REFUSED = 'refused: private address';

class RefusedTargetError extends Error {
  readonly code = 'EREFUSEDTARGET';
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void;

/**
 * Resolves like dns.lookup, keeping only the addresses the policy allows for `host`. The socket
 * connects to what this returns, so the address checked is the address connected to: a name that
 * resolves elsewhere a moment later (DNS rebinding) cannot slip between check and connect.
 */
function checkedLookup(policy: CallbackTargetPolicy, host: string) {
  return (hostname: string, options: dns.LookupOptions, callback: LookupCallback): void => {
    dns.lookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, '');
      const allowed = addresses.filter((a) => policy.allows(host, a.address));
      const first = allowed[0];
      if (!first) return callback(new RefusedTargetError(`${hostname} resolves only to internal addresses`), '');
      if (options.all) callback(null, allowed);
      else callback(null, first.address, first.family);
    });
  };
}

/** POSTs with node's http/https (no redirects followed, no connection reuse), under the target policy. */
export function callbackPoster(policy: CallbackTargetPolicy): PostCallback {
  return (urlText, headers, body, timeoutMs) =>
    new Promise((resolve) => {
      const url = new URL(urlText);
      const host = hostnameOf(url);
      if (net.isIP(host) !== 0 && !policy.allows(host, host)) return resolve(REFUSED);
      let timedOut = false;
      const transport = url.protocol === 'https:' ? https : http;
      const req = transport.request(url, {
        method: 'POST',
        headers: { ...headers, 'content-length': Buffer.byteLength(body) },
        agent: false,
        lookup: checkedLookup(policy, host) as unknown as net.LookupFunction,
      });
      const timer = setTimeout(() => {
        timedOut = true;
        req.destroy();
      }, timeoutMs);
      req.on('response', (res) => {
        clearTimeout(timer);
        res.resume();
        req.destroy();
        const status = res.statusCode ?? 0;
        resolve(status >= 200 && status < 300 ? null : `http ${status}`);
      });
      req.on('error', (error) => {
        clearTimeout(timer);
        resolve(error instanceof RefusedTargetError ? REFUSED : timedOut ? 'timeout' : 'connection failed');
      });
      req.end(body);
    });
}
