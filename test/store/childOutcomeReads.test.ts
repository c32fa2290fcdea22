import fc from 'fast-check';

import { dueChildOutcomes } from '../../src/store/childOutcomes';
import { backends, isPostgresBackend } from '../helpers/backends';
import { startService, TestService } from '../helpers/service';

const TENANTS = ['a', 'a0', 'b', 'c', 'c1', 'd', 'zz'];
/** Names that a locale orders otherwise than bytes do (PostgreSQL's default collation). */
const MIXED = ['Beta', 'acme', 'Zed', '_x', 'é', 'e'];

describe.each(backends())('the read of due child outcomes, leaving tenants out (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
    // A PostgreSQL database's default collation may be a locale's, which orders 'acme' before 'Beta':
    // this server's is C, so the column takes ICU's root locale here, for the reads to meet one.
    if (isPostgresBackend(backend.name)) await svc.rollcall.db.raw('ALTER TABLE child_outcomes ALTER COLUMN tenant TYPE varchar(64) COLLATE "und-x-icu"');
    const rows = [...TENANTS, ...MIXED].flatMap((tenant, t) =>
      [0, 1, 2].map((n) => ({
        batch_id: `00000000-0000-7000-8000-${String(t * 10 + n).padStart(12, '0')}`,
        tenant,
        parent_item: 'x',
        outcome: 'succeeded',
        next_attempt_at: 1 + n,
        attempts: 0,
        created_at: 1,
      })),
    );
    await svc.rollcall.db('child_outcomes').insert(rows);
  });
  afterAll(() => svc.stop());

  const tenantsRead = async (leftOut: string[]) => new Set((await dueChildOutcomes(svc.rollcall.db, 10, 1000, leftOut)).map((row) => row.tenant));

  it('when any tenants are left out, then exactly the others’ rows are read', async () => {
    await fc.assert(
      fc.asyncProperty(fc.shuffledSubarray(TENANTS), async (leftOut) => {
        expect([...(await tenantsRead(leftOut))].filter((t) => TENANTS.includes(t)).sort()).toEqual(TENANTS.filter((t) => !leftOut.includes(t)).sort());
      }),
      { numRuns: 40 },
    );
  });

  it('when tenants whose names a locale orders otherwise are left out, then exactly the others’ rows are read', async () => {
    await fc.assert(
      fc.asyncProperty(fc.shuffledSubarray(MIXED, { minLength: 2 }), async (leftOut) => {
        const read = await tenantsRead(leftOut);
        for (const tenant of [...TENANTS, ...MIXED]) expect([leftOut, tenant, read.has(tenant)]).toEqual([leftOut, tenant, !leftOut.includes(tenant)]);
      }),
      { numRuns: 30 },
    );
  });
});
