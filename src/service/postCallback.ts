import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';

import { CallbackTargetPolicy, hostnameOf } from '../domain/callbackTarget';
import { dnsOnlyResolver, ResolveHost, systemResolver } from './callbackDns';

/**
 * One delivery attempt: resolves with null on a 2xx, else with what went wrong, in words that say
 * nothing about hosts other than the receiver (no port-scan oracle): `refused: private address`,
 * `timeout`, `http <status>` or `connection failed`. `stopping` aborts when the process shuts down:
 * the attempt may then end at once with any of those (the dispatcher records none of it).
 */
export type PostCallback = (url: string, headers: Record<string, string>, body: string, timeoutMs: number, stopping?: AbortSignal) => Promise<string | null>;

const REFUSED = 'refused: private address';

class RefusedTargetError extends Error {
  readonly code = 'EREFUSEDTARGET';
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void;

/**
 * Resolves with `resolve`, keeping only the addresses the policy allows for `host`, and answers as
 * dns.lookup does (one address, or all of them for happy eyeballs). The socket connects to what
 * this returns, so the address checked is the address connected to: a name that resolves elsewhere
 * a moment later (DNS rebinding) cannot slip between check and connect.
 */
function checkedLookup(policy: CallbackTargetPolicy, host: string, resolve: ResolveHost) {
  return (hostname: string, options: dns.LookupOptions, callback: LookupCallback): void => {
    resolve(hostname, options).then(
      (addresses) => {
        const allowed = addresses.filter((a) => policy.allows(host, a.address));
        const first = allowed[0];
        if (!first) return callback(new RefusedTargetError(`${hostname} resolves only to internal addresses`), '');
        if (options.all) callback(null, allowed);
        else callback(null, first.address, first.family);
      },
      (error: NodeJS.ErrnoException) => callback(error, ''),
    );
  };
}

/**
 * Where a callback's host name is resolved. With tokens a tenant chooses it, so it goes to DNS
 * alone, off libuv's thread pool: a zone whose servers never answer would otherwise hold the two
 * threads libuv lets lookups take for glibc's whole timeout, and with them every tenant's callbacks
 * and the database driver's new connections to a host name. Names the operator chose (a token-less
 * service, CALLBACK_ALLOW_HOSTS entries) keep the system's resolver, /etc/hosts and docker's names.
 */
function resolverFor(policy: CallbackTargetPolicy, dnsServers: readonly string[]): (host: string) => ResolveHost {
  if (!policy.enforce) return () => systemResolver;
  const tenantResolver = dnsOnlyResolver(dnsServers);
  return (host) => (policy.listsByName(host) ? systemResolver : tenantResolver);
}

/**
 * POSTs with node's http/https (no redirects followed, no connection reuse), under the target policy.
 * @param dnsServers CALLBACK_DNS_SERVERS: where tenants' host names are resolved (empty: resolv.conf's).
 */
export function callbackPoster(policy: CallbackTargetPolicy, dnsServers: readonly string[] = []): PostCallback {
  const resolveFor = resolverFor(policy, dnsServers);
  return (urlText, headers, body, timeoutMs, stopping) =>
    new Promise((resolve) => {
      const url = new URL(urlText);
      const host = hostnameOf(url);
      if (net.isIP(host) !== 0 && !policy.allows(host, host)) return resolve(REFUSED);
      let timedOut = false;
      // Settled once, by whichever ends the attempt first: each handler below may not come at all.
      let settled = false;
      const settle = (outcome: string | null) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(outcome);
      };
      const transport = url.protocol === 'https:' ? https : http;
      const req = transport.request(url, {
        method: 'POST',
        headers: { ...headers, 'content-length': Buffer.byteLength(body) },
        agent: false,
        lookup: checkedLookup(policy, host, resolveFor(host)) as unknown as net.LookupFunction,
        signal: stopping,
      });
      // The timer settles by itself too: on a request already destroyed (below) `destroy` does nothing.
      const timer = setTimeout(() => {
        timedOut = true;
        req.destroy();
        settle('timeout');
      }, timeoutMs);
      req.on('response', (res) => {
        res.resume();
        req.destroy();
        const status = res.statusCode ?? 0;
        settle(status >= 200 && status < 300 ? null : `http ${status}`);
      });
      // A 101 to another protocol comes as `upgrade`, never as `response`; without this listener Node
      // destroyed the socket and emitted neither `response` nor `error`, and the attempt never ended.
      req.on('upgrade', (res, socket) => {
        socket.destroy();
        settle(`http ${res.statusCode ?? 101}`);
      });
      req.on('error', (error) => settle(error instanceof RefusedTargetError ? REFUSED : timedOut ? 'timeout' : 'connection failed'));
      // Whatever else ends the request without either: the attempt failed.
      req.on('close', () => settle(timedOut ? 'timeout' : 'connection failed'));
      req.end(body);
    });
}
