import { Claimant, loadOf, pickFairly, ShareLimits } from '../../src/domain/fairShare';

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
