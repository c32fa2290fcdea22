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
}

/** Deliveries in flight now, by tenant and by host. */
export interface Load {
  tenants: Map<string, number>;
  hosts: Map<string, number>;
}

export function loadOf(inFlight: Iterable<Claimant>): Load {
  const load: Load = { tenants: new Map(), hosts: new Map() };
  for (const c of inFlight) add(load, c);
  return load;
}

function add(load: Load, c: Claimant): void {
  load.tenants.set(c.tenant, (load.tenants.get(c.tenant) ?? 0) + 1);
  load.hosts.set(c.host, (load.hosts.get(c.host) ?? 0) + 1);
}

/** Tenants and hosts that use their whole share: their events need not even be read. */
export function saturated(load: Load, limits: ShareLimits): { tenants: string[]; hosts: string[] } {
  return {
    tenants: [...load.tenants].filter(([, n]) => n >= limits.perTenant).map(([t]) => t),
    hosts: [...load.hosts].filter(([, n]) => n >= limits.perHost).map(([h]) => h),
  };
}

/**
 * Chooses up to `slots` of the due candidates (oldest first) without taking any tenant or host past
 * its share: a receiver that never answers holds at most `perHost` slots, a tenant at most
 * `perTenant`, and the rest go to everyone else.
 */
export function pickFairly<T extends Claimant>(candidates: readonly T[], load: Load, limits: ShareLimits, slots: number): T[] {
  const picked: T[] = [];
  const after: Load = { tenants: new Map(load.tenants), hosts: new Map(load.hosts) };
  for (const c of candidates) {
    if (picked.length >= slots) break;
    if ((after.tenants.get(c.tenant) ?? 0) >= limits.perTenant || (after.hosts.get(c.host) ?? 0) >= limits.perHost) continue;
    picked.push(c);
    add(after, c);
  }
  return picked;
}
