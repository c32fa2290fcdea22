/** An event waiting for delivery, as far as sharing slots goes. */
export interface Claimant {
  tenant: string;
  host: string;
}

export interface ShareLimits {
  /** Deliveries in flight per tenant at most. */
  perTenant: number;
  /** Deliveries in flight per receiving host at most. */
  perHost: number;
  /**
   * Of one host's slots, how many one tenant holds before other tenants' events for that host go
   * first (`fair`), and how many it may hold at most (`most`): below `perHost` where several tenants
   * may share a host, so another tenant's event always finds one of its slots free.
   */
  perTenantOnHost: { fair: number; most: number };
}

/** Deliveries in flight now, by tenant, by host, and by tenant on a host. */
export interface Load {
  tenants: Map<string, number>;
  hosts: Map<string, number>;
  pairs: Map<string, { pair: Claimant; count: number }>;
}

export function loadOf(inFlight: Iterable<Claimant>): Load {
  const load: Load = { tenants: new Map(), hosts: new Map(), pairs: new Map() };
  for (const c of inFlight) add(load, c);
  return load;
}

const pairKey = (c: Claimant) => JSON.stringify([c.tenant, c.host]);
const onHost = (load: Load, c: Claimant) => load.pairs.get(pairKey(c))?.count ?? 0;

function add(load: Load, c: Claimant): void {
  load.tenants.set(c.tenant, (load.tenants.get(c.tenant) ?? 0) + 1);
  load.hosts.set(c.host, (load.hosts.get(c.host) ?? 0) + 1);
  load.pairs.set(pairKey(c), { pair: { tenant: c.tenant, host: c.host }, count: onHost(load, c) + 1 });
}

function copyOf(load: Load): Load {
  const pairs = new Map([...load.pairs].map(([key, { pair, count }]) => [key, { pair, count }]));
  return { tenants: new Map(load.tenants), hosts: new Map(load.hosts), pairs };
}

/**
 * Tenants, hosts, and tenants on a host that use their whole share (a tenant on a host: `onHost`
 * slots of it): their events need not even be read.
 */
export function saturated(load: Load, limits: ShareLimits, onHostLimit: number): { tenants: string[]; hosts: string[]; pairs: Claimant[] } {
  return {
    tenants: [...load.tenants].filter(([, n]) => n >= limits.perTenant).map(([t]) => t),
    hosts: [...load.hosts].filter(([, n]) => n >= limits.perHost).map(([h]) => h),
    pairs: [...load.pairs.values()].filter(({ count }) => count >= onHostLimit).map(({ pair }) => pair),
  };
}

/**
 * Tenants on a host held to their fair share of its slots that may take more there (below the most a
 * tenant may hold on a host, with their tenant's and the host's shares not used up).
 */
export function heldToFairShare(load: Load, limits: ShareLimits): Claimant[] {
  const { fair, most } = limits.perTenantOnHost;
  return [...load.pairs.values()]
    .filter(({ count }) => count >= fair && count < most)
    .filter(({ pair }) => (load.tenants.get(pair.tenant) ?? 0) < limits.perTenant && (load.hosts.get(pair.host) ?? 0) < limits.perHost)
    .map(({ pair }) => pair);
}

/**
 * Chooses up to `slots` of the due candidates (oldest first) without taking any tenant, host, or
 * tenant on a host past its share (`onHostLimit`): a receiver that never answers holds at most
 * `perHost` slots, a tenant at most `perTenant`, and the rest go to everyone else.
 */
export function pickFairly<T extends Claimant>(candidates: readonly T[], load: Load, limits: ShareLimits, slots: number, onHostLimit: number): T[] {
  const picked: T[] = [];
  const after = copyOf(load);
  for (const c of candidates) {
    if (picked.length >= slots) break;
    if ((after.tenants.get(c.tenant) ?? 0) >= limits.perTenant || (after.hosts.get(c.host) ?? 0) >= limits.perHost || onHost(after, c) >= onHostLimit) continue;
    picked.push(c);
    add(after, c);
  }
  return picked;
}

/**
 * Up to `limit` of `rows` taken one tenant at a time, in turns (each tenant's rows in their order,
 * tenants in the order of their first row): a tenant with a backlog of thousands gets one of each
 * round of turns, so another tenant's few rows are among the first taken, not behind the backlog.
 */
export function inTurns<T extends { tenant: string }>(rows: readonly T[], limit: number): T[] {
  const queues = new Map<string, T[]>();
  for (const row of rows) {
    const queue = queues.get(row.tenant);
    if (queue) queue.push(row);
    else queues.set(row.tenant, [row]);
  }
  const taken: T[] = [];
  for (let turn = 0; taken.length < limit; turn++) {
    const inTurn = [...queues.values()].filter((queue) => turn < queue.length).map((queue) => queue[turn] as T);
    if (inTurn.length === 0) break;
    taken.push(...inTurn.slice(0, limit - taken.length));
  }
  return taken;
}

/** Tenants with at least `least` of `rows`: those whose backlog may hide others' rows past a read's limit. */
export function crowdingTenants(rows: ReadonlyArray<{ tenant: string }>, least: number): string[] {
  const counts = new Map<string, number>();
  for (const { tenant } of rows) counts.set(tenant, (counts.get(tenant) ?? 0) + 1);
  return [...counts].filter(([, n]) => n >= least).map(([tenant]) => tenant);
}
