import dns from 'node:dns';
import fs from 'node:fs';

/** Finds the addresses of a callback's host name: every one of them, as dns.lookup with `all: true` does. */
export type ResolveHost = (hostname: string, options: dns.LookupOptions) => Promise<dns.LookupAddress[]>;

/**
 * The system's resolver (getaddrinfo: /etc/hosts, docker's names, search domains, nsswitch). It
 * runs on libuv's thread pool, where every lookup of the process (the database driver's connects to
 * a host name too) shares two threads: only for names the operator chose (a token-less service,
 * CALLBACK_ALLOW_HOSTS entries), never a tenant's.
 */
export const systemResolver: ResolveHost = (hostname, options) =>
  new Promise((resolve, reject) => dns.lookup(hostname, { ...options, all: true }, (error, addresses) => (error ? reject(error) : resolve(addresses))));

/**
 * c-ares's wait for a first answer, and how often each server is asked: a name server that never
 * answers fails a query in about 3–4 s (c-ares waits longer on the retry). Once a server has
 * answered a few queries, c-ares (≥ 1.32) sets each try's wait from its answer times instead (5×
 * their mean, 250 ms to 5 s): a fast resolver's tries end sooner, and a name it takes longer to
 * resolve fails this attempt, to be tried again with the callback's backoff. Not a thread held
 * meanwhile, only a pending query; CALLBACK_TIMEOUT still ends the delivery on its own.
 */
const QUERY_TIMEOUT_MS = 1000;
const QUERY_TRIES = 2;

const newResolver = () => new dns.promises.Resolver({ timeout: QUERY_TIMEOUT_MS, tries: QUERY_TRIES });

function fixedResolver(servers: readonly string[]): () => dns.promises.Resolver {
  const resolver = newResolver();
  resolver.setServers(servers);
  return () => resolver;
}

/** The file c-ares reads its name servers from when a resolver is made. */
const RESOLV_CONF = '/etc/resolv.conf';

export interface ResolvConfOptions {
  /** How often, at most, resolv.conf is looked at again (5 s). */
  recheckMs?: number;
}

/**
 * What tells a changed file: a container runtime rewrites it in place, a DHCP client replaces it.
 * Asked synchronously: a few microseconds for a local file, where an asynchronous `stat` would
 * queue on libuv's thread pool, behind the very lookups this module keeps tenants' names away from.
 */
function signatureOf(): string {
  try {
    const stat = fs.statSync(RESOLV_CONF);
    return `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeMs}:${stat.ctimeMs}`;
  } catch {
    return 'missing';
  }
}

/**
 * A resolver with resolv.conf's name servers as the file says now. c-ares reads the file once, when
 * a resolver is made: after a change (a container's DNS moved, a VPN came up) it would go on asking
 * the old servers for the process's life, where glibc's resolver, which the rest of the process
 * uses, notices the change. So the file is looked at again at most every `recheckMs`, and a new
 * resolver is made when it changed.
 */
function resolvConfServers({ recheckMs = 5000 }: ResolvConfOptions): () => dns.promises.Resolver {
  let signature = signatureOf();
  let resolver = newResolver();
  // A monotonic clock: the wall clock stepped back (NTP, a resumed VM) would put off the next look.
  let checkedAt = performance.now();
  return () => {
    if (performance.now() - checkedAt < recheckMs) return resolver;
    checkedAt = performance.now();
    const now = signatureOf();
    if (now !== signature) {
      signature = now;
      resolver = newResolver();
    }
    return resolver;
  };
}

/** RFC 6761 reserves these names for loopback: they mean this host whatever DNS answers. */
const LOOPBACK: readonly dns.LookupAddress[] = [
  { address: '127.0.0.1', family: 4 },
  { address: '::1', family: 6 },
];

const isLoopbackName = (hostname: string) => /(^|\.)localhost\.?$/i.test(hostname);

/** The family a socket asks for: 4, 6, or 0 for either. */
function familyWanted(family: dns.LookupOptions['family']): 0 | 4 | 6 {
  if (family === 4 || family === 'IPv4') return 4;
  if (family === 6 || family === 'IPv6') return 6;
  return 0;
}

interface Answer {
  addresses: dns.LookupAddress[];
  error?: unknown;
}

const NOT_ASKED: Answer = { addresses: [] };

/** Records of one type as lookup addresses; a name without them (or a failed query) is an empty list plus the error. */
async function addressesOf(query: Promise<string[]>, family: 4 | 6): Promise<Answer> {
  try {
    return { addresses: (await query).map((address) => ({ address, family })) };
  } catch (error) {
    return { addresses: [], error };
  }
}

/**
 * Resolves names through DNS alone, with c-ares (which keeps its queries on the event loop, not on
 * libuv's thread pool), so a tenant's name whose servers never answer holds no thread the rest of
 * the process needs. A and AAAA are asked in parallel (one of them when the socket wants one
 * family); IPv4 first, so a host without IPv6 connects at once, and happy eyeballs tries the rest.
 * No /etc/hosts and no search domains: a tenant names hosts on the internet.
 *
 * @param servers CALLBACK_DNS_SERVERS (`ip`, `ip:port`, `[ipv6]:port`); empty: resolv.conf's, as
 * it is now (resolvConfServers).
 */
export function dnsOnlyResolver(servers: readonly string[], resolvConf: ResolvConfOptions = {}): ResolveHost {
  const resolverNow = servers.length > 0 ? fixedResolver(servers) : resolvConfServers(resolvConf);
  return async (hostname, options) => {
    const family = familyWanted(options.family);
    if (isLoopbackName(hostname)) return LOOPBACK.filter((a) => family === 0 || a.family === family);
    const resolver = resolverNow();
    const answers = await Promise.all([
      family === 6 ? NOT_ASKED : addressesOf(resolver.resolve4(hostname), 4),
      family === 4 ? NOT_ASKED : addressesOf(resolver.resolve6(hostname), 6),
    ]);
    const addresses = answers.flatMap((answer) => answer.addresses);
    if (addresses.length > 0) return addresses;
    throw answers.find((answer) => answer.error)?.error ?? new Error(`${hostname} has no addresses`);
  };
}
