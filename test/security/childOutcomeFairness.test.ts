import { ChildOutcomeDispatcher } from '../../src/service/childOutcomeDispatcher';
import { backends } from '../helpers/backends';
import { batchWith, TestBatch } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

const TOKENS = ['a', 'b', 'c'].map((tenant) => ({ token: `tenant-${tenant}-token-0123456789`, tenant, scopes: ['produce', 'read', 'consume'] }));
const tokenOf = (tenant: string) => `tenant-${tenant}-token-0123456789`;

/**
 * Finished children reach their parent items through child_outcomes, claimed 100 at a time. Two
 * tenants that each finish 150 children at once (empty children, sealed) must not make a third
 * tenant's one child wait behind their backlog: its parent item is acked in the first round.
 */
describe.each(backends())("tenants' backlogs of finished children (%s)", (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS) });
  });
  afterAll(() => svc.stop());

  /** `count` empty children of `parent`'s items, sealed (so finished) at once, made as tenant's. */
  async function finishChildren(tenant: string, parent: TestBatch): Promise<void> {
    const client = svc.clientWith(tokenOf(tenant));
    for (let at = 0; at < parent.ids.length; at += 25)
      await Promise.all(parent.ids.slice(at, at + 25).map((parentItem) => batchWith(client, 0, { parentItem })));
  }

  it("when tenants a and c finished 150 children each, then tenant b's child, finished after them, reaches its parent item in the first round", async () => {
    const parentOf = async (tenant: string, count: number) => batchWith(svc.clientWith(tokenOf(tenant)), count);
    const [a, b, c] = [await parentOf('a', 150), await parentOf('b', 1), await parentOf('c', 150)];
    await finishChildren('a', a);
    svc.clock.now += 1;
    await finishChildren('c', c);
    svc.clock.now += 1; // b's outcome is due after every one of theirs
    await finishChildren('b', b);

    const dispatcher = new ChildOutcomeDispatcher(svc.rollcall.deps);
    svc.rollcall.deps.onCompleted = (batches) => {
      if (batches.some((batch) => batch.id === b.id)) dispatcher.stop(); // the round under way is the last
    };
    await dispatcher.deliverDue();
    expect((await svc.clientWith(tokenOf('b')).status(b.id)).state).toBe('complete');
    const waiting = await svc.rollcall.db('child_outcomes').whereIn('tenant', ['a', 'c']).count({ n: '*' });
    expect(Number(waiting[0]?.n)).toBeGreaterThanOrEqual(200); // one round took at most 100 of their 300

    svc.rollcall.deps.onCompleted = undefined;
    await new ChildOutcomeDispatcher(svc.rollcall.deps).deliverDue();
    for (const [tenant, parent] of [['a', a] as const, ['c', c] as const])
      expect(await svc.clientWith(tokenOf(tenant)).status(parent.id)).toMatchObject({ state: 'complete', succeeded: 150 });
  });

  it("when a read holds 95 of tenant a's outcomes and 5 of b's, then each of the 100 is acked into its parent once", async () => {
    const [a, b] = [await batchWith(svc.clientWith(tokenOf('a')), 95), await batchWith(svc.clientWith(tokenOf('b')), 5)];
    await finishChildren('a', a);
    await finishChildren('b', b);
    expect(await new ChildOutcomeDispatcher(svc.rollcall.deps).deliverDue()).toBe(100);
    expect(await svc.clientWith(tokenOf('a')).status(a.id)).toMatchObject({ state: 'complete', succeeded: 95 });
    expect(await svc.clientWith(tokenOf('b')).status(b.id)).toMatchObject({ state: 'complete', succeeded: 5 });
  });
});
