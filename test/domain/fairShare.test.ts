import fc from 'fast-check';

import { Claimant, crowdingTenants, inTurns, loadOf, pickFairly, ShareLimits } from '../../src/domain/fairShare';

const limits: ShareLimits = { perTenant: 8, perHost: 4, perTenantOnHost: { fair: 2, most: 3 } };
const on = (tenant: string, host: string, n: number): Claimant[] => Array.from({ length: n }, () => ({ tenant, host }));
const names = (picked: Claimant[]) => picked.map((c) => `${c.tenant}@${c.host}`);

describe('sharing delivery slots', () => {
  it("when a tenant holds its fair share of a host, then another tenant's events for that host go first", () => {
    const load = loadOf(on('a', 'h', 2));
    const picked = pickFairly([...on('a', 'h', 5), ...on('b', 'h', 5)], load, limits, 10, limits.perTenantOnHost.fair);
    expect(names(picked)).toEqual(['b@h', 'b@h']);
  });

  it('when only one tenant has events for a host, then it takes all but one of its slots, and no more', () => {
    const picked = pickFairly(on('a', 'h', 10), loadOf([]), limits, 10, limits.perTenantOnHost.most);
    expect(names(picked)).toEqual(['a@h', 'a@h', 'a@h']);
  });

  it('when a host is full, then a tenant still takes slots at its other hosts, up to the most it may hold at each', () => {
    const load = loadOf([...on('a', 'h', 3), ...on('b', 'h', 1)]);
    const picked = pickFairly([...on('a', 'h', 2), ...on('a', 'g', 9)], load, limits, 10, limits.perTenantOnHost.most);
    expect(names(picked)).toEqual(['a@g', 'a@g', 'a@g']);
  });
});

describe('taking rows of several tenants in turns', () => {
  const rows = (tenant: string, n: number) => Array.from({ length: n }, (_, at) => ({ tenant, at }));

  it("when one tenant has hundreds of rows before another's two, then the other's are taken second and fourth", () => {
    const taken = inTurns([...rows('a', 300), ...rows('b', 2)], 100);
    expect(taken.slice(0, 5).map((r) => `${r.tenant}${r.at}`)).toEqual(['a0', 'b0', 'a1', 'b1', 'a2']);
    expect(taken).toHaveLength(100);
  });

  it('when rows of any tenants are taken, then each tenant keeps its order and no tenant gets two more than another that has rows left', () => {
    const tenantRows = fc.array(fc.constantFrom('a', 'b', 'c', 'd'), { maxLength: 60 });
    fc.assert(
      fc.property(tenantRows, fc.integer({ min: 0, max: 70 }), (list, limit) => {
        const all = list.map((tenant, at) => ({ tenant, at }));
        const taken = inTurns(all, limit);
        expect(taken).toHaveLength(Math.min(limit, all.length));
        const count = (tenant: string, of: typeof all) => of.filter((r) => r.tenant === tenant).length;
        for (const tenant of ['a', 'b', 'c', 'd']) {
          const own = taken.filter((r) => r.tenant === tenant);
          expect(own).toEqual(all.filter((r) => r.tenant === tenant).slice(0, own.length));
          for (const other of ['a', 'b', 'c', 'd'])
            if (count(other, taken) < count(other, all)) expect(own.length).toBeLessThanOrEqual(count(other, taken) + 1);
        }
      }),
    );
  });

  it('when a read holds ten or more rows of a tenant, then that tenant crowds it', () => {
    expect(crowdingTenants([...rows('a', 10), ...rows('b', 9), ...rows('c', 1)], 10)).toEqual(['a']);
  });
});
