import net from 'node:net';

/**
 * Where callbacks may go (API.md, "Callbacks in a multi-tenant service"). With tokens configured, a
 * tenant must not make the service reach into its own network: loopback, private, link-local,
 * unique-local, site-local, multicast, broadcast, unspecified and other special-purpose addresses
 * (IETF protocol assignments, benchmarking) are refused unless
 * CALLBACK_ALLOW_HOSTS names them.
 */
const FORBIDDEN = new net.BlockList();
for (const [prefix, bits] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24], // IETF protocol assignments (192.0.0.192: a cloud's legacy metadata address)
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking: not routed on the internet, used inside some networks
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, and the broadcast address 255.255.255.255
] as const) {
  FORBIDDEN.addSubnet(prefix, bits, 'ipv4');
}
// NAT64's well-known prefix and 6to4 are checked by the IPv4 address they carry (embeddedIPv4): an
// IPv6-only network with DNS64 reaches every public IPv4 host as 64:ff9b::a.b.c.d.
for (const [prefix, bits] of [
  ['::', 96], // :: and ::1, and the deprecated IPv4-compatible ::a.b.c.d (::127.0.0.1)
  ['::ffff:0:0:0', 96], // IPv4-translated (SIIT): ::ffff:0:7f00:1 is 127.0.0.1 to a translator
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10], // site-local: deprecated, private where still used
  ['ff00::', 8], // multicast
  ['64:ff9b:1::', 48], // NAT64 for local use (RFC 8215): its translator may reach private networks
] as const) {
  FORBIDDEN.addSubnet(prefix, bits, 'ipv6');
}

/** The 16 bytes of an IPv6 address (`::` and a final dotted quad allowed), or null for anything else. */
function ipv6Bytes(address: string): number[] | null {
  if (!net.isIPv6(address)) return null;
  let text = address.replace(/%.*$/, '');
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (quad) {
    const [a, b, c, d] = quad.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, quad.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const groupsOf = (part: string) => (part ? part.split(':') : []);
  const [before, after] = [groupsOf(head), tail === undefined ? [] : groupsOf(tail)];
  const groups = tail === undefined ? before : [...before, ...Array<string>(8 - before.length - after.length).fill('0'), ...after];
  return groups.flatMap((group) => {
    const value = parseInt(group, 16);
    return [value >> 8, value & 255];
  });
}

/**
 * The IPv4 address an IPv6 address stands for, where it carries one a router acts on: IPv4-mapped
 * (`::ffff:10.0.0.1`, `::ffff:a00:1`), NAT64's well-known prefix (`64:ff9b::a.b.c.d`, which RFC 6052
 * keeps for global IPv4 addresses; a translator that did otherwise would still be caught here) and
 * 6to4 (`2002:aabb:ccdd::/48`).
 */
function embeddedIPv4(address: string): string | null {
  const bytes = ipv6Bytes(address);
  if (!bytes) return null;
  const zero = (from: number, to: number) => bytes.slice(from, to).every((byte) => byte === 0);
  if (zero(0, 10) && bytes[10] === 0xff && bytes[11] === 0xff) return bytes.slice(12).join('.');
  if (bytes[1] === 0x64 && bytes[2] === 0xff && bytes[3] === 0x9b && zero(0, 1) && zero(4, 12)) return bytes.slice(12).join('.');
  if (bytes[0] === 0x20 && bytes[1] === 0x02) return bytes.slice(2, 6).join('.');
  return null;
}

/** The address as it is checked: an IPv6 address carrying an IPv4 one (embeddedIPv4) as that IPv4 address. */
function unmapped(address: string): string {
  return embeddedIPv4(address) ?? address.toLowerCase();
}

const familyOf = (address: string) => (net.isIPv4(address) ? 'ipv4' : 'ipv6');

/** Whether an address (v4, v6 or v4-mapped v6) is one a tenant's callback must not reach. */
export function isInternalAddress(address: string): boolean {
  const plain = unmapped(address);
  return FORBIDDEN.check(plain, familyOf(plain));
}

/** The host of a URL as it is connected to: `[::1]` → `::1`. */
export const hostnameOf = (url: URL): string => url.hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();

export class CallbackTargetPolicy {
  private readonly names = new Set<string>();
  private readonly allowed = new net.BlockList();

  /**
   * @param enforce false for a token-less (loopback, development) service: every target is allowed.
   * @param allowHosts CALLBACK_ALLOW_HOSTS: host names, addresses or CIDRs that are exempt.
   */
  constructor(
    readonly enforce: boolean,
    allowHosts: readonly string[] = [],
  ) {
    for (const entry of allowHosts) {
      const [address, bits] = entry.split('/') as [string, string | undefined];
      if (net.isIP(address) === 0) this.names.add(entry.toLowerCase());
      else if (bits === undefined) this.allowed.addAddress(unmapped(address), familyOf(unmapped(address)));
      else this.allowed.addSubnet(address, Number(bits), familyOf(address));
    }
  }

  /** Whether a callback to `host` (as named in the URL) may connect to `address`. */
  allows(host: string, address: string): boolean {
    if (!this.enforce || this.listsByName(host)) return true;
    const plain = unmapped(address);
    return !isInternalAddress(plain) || this.allowed.check(plain, familyOf(plain));
  }

  /** Whether CALLBACK_ALLOW_HOSTS names `host` (a name the operator chose, not a tenant). */
  listsByName(host: string): boolean {
    return this.names.has(host.toLowerCase());
  }

  /** For a URL whose host is a literal address: whether it is allowed (names are checked when resolved). */
  allowsLiteral(url: URL): boolean {
    const host = hostnameOf(url);
    return net.isIP(host) === 0 || this.allows(host, host);
  }
}

/** A DNS name as a URL's host can be: dot-separated labels of letters, digits, '-' and '_' (used in internal names), ≤ 253 characters. */
const HOST_NAME = /^(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$/i;

/** Parses CALLBACK_ALLOW_HOSTS; returns an error message for an entry it cannot read. */
export function invalidAllowEntry(entry: string): string | null {
  const [address, bits, extra] = entry.split('/');
  if (extra !== undefined || !address) return `${entry} is not a host name, address or CIDR`;
  // An entry that is neither (a space, a port, a scheme) was taken and could never match a host.
  if (bits === undefined) return net.isIP(address) !== 0 || HOST_NAME.test(address) ? null : `${entry} is not a host name, address or CIDR`;
  const max = net.isIPv4(address) ? 32 : net.isIPv6(address) ? 128 : -1;
  if (max < 0 || !/^\d+$/.test(bits) || Number(bits) > max) return `${entry} is not a CIDR`;
  return null;
}
