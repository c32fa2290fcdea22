import { randomUUID } from 'node:crypto';

import { Knex } from 'knex';

import { Backend, describeEachOrSkip, isPostgresBackend, serverBackends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { until } from '../helpers/realTime';
import { holdBatchRow, lockWaiters, otherConnections } from '../helpers/rowLocks';
import { startService, TestService } from '../helpers/service';

const TOKENS = [
  { token: 'tenant-a-token-0123456789', tenant: 'a', scopes: ['produce', 'read', 'consume'] },
  { token: 'tenant-b-token-0123456789', tenant: 'b', scopes: ['produce', 'read', 'consume'] },
];
const [tokenA, tokenB] = TOKENS.map((t) => t.token) as [string, string];

/**
 * Tenant b's batch row is locked (b's own long add, a stuck replica) while tenant a sends calls
 * naming that batch: a learns nothing of it (404 or unknown_batch, as for a batch that does not
 * exist, not 503 after a lock wait, which says it does) and takes no part in b's lock.
 */
/** A service with tenants a and b and LOCK_TIMEOUT 1 s, and two pools of another replica: one to hold rows, one to look. */
function lockedBatchSetup(backend: Backend, env: Record<string, string> = {}) {
  let svc: TestService;
  let holder: Knex;
  let observer: Knex;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), LOCK_TIMEOUT: '1s', ...env });
    holder = otherConnections(svc.database);
    observer = otherConnections(svc.database);
  });
  afterAll(async () => {
    await holder.destroy();
    await observer.destroy();
    await svc.stop();
  });
  return { svc: () => svc, holder: () => holder, observer: () => observer };
}

describeEachOrSkip(serverBackends())("another tenant's calls naming a batch whose row is locked (%s)", (_name, backend) => {
  const { svc, holder } = lockedBatchSetup(backend);

  it.each([
    ['seal', 'post', '/seal', {}],
    ['add', 'post', '/items', { count: 10 }],
    ['cancel', 'post', '/cancel', {}],
    ['delete', 'delete', '', undefined],
  ] as const)('when a calls %s on it, then a is answered 404 batch_not_found at once and the batch is as b left it', async (_call, method, path, body) => {
    const batch = await batchWith(svc().clientWith(tokenB), 10, { sealed: false });
    const release = await holdBatchRow(holder(), batch.id);
    let res;
    const started = performance.now();
    try {
      const call = svc().api[method](`/v1/batches/${batch.id}${path}`).set('Authorization', `Bearer ${tokenA}`);
      res = await (body === undefined ? call : call.send(body));
    } finally {
      await release();
    }
    expect([res.status, res.body.error?.code]).toEqual([404, 'batch_not_found']);
    expect(performance.now() - started).toBeLessThan(1000); // not after a wait for b's lock (LOCK_TIMEOUT 1 s)
    const asB = await svc().api.get(`/v1/batches/${batch.id}`).set('Authorization', `Bearer ${tokenB}`);
    expect(asB.body).toMatchObject({ state: 'open', total: 10 });
  });
});

describeEachOrSkip(serverBackends())("another tenant's acks naming a batch whose row is locked (%s)", (_name, backend) => {
  describe.each(['on', 'off'])('ACK_GROUP_COMMIT=%s', (groupCommit) => {
    const { svc, holder, observer } = lockedBatchSetup(backend, { ACK_GROUP_COMMIT: groupCommit });

    /** What tenant a is answered for acks of these IDs, and how long it took. */
    async function ackAsA(ids: string[]): Promise<{ status: number; body: Record<string, unknown>; ms: number }> {
      const started = performance.now();
      const res = await svc().api.post('/v1/acks').set('Authorization', `Bearer ${tokenA}`).send({ ids });
      return { status: res.status, body: res.body as Record<string, unknown>, ms: performance.now() - started };
    }

    const madeUpId = (index: number) => `${randomUUID()}:${randomUUID()}:${index}`;

    it("when a acks items of it beside its own, then a's own are acked and b's are unknown_batch at once, as for a batch that does not exist", async () => {
      const batch = await batchWith(svc().clientWith(tokenB), 10);
      const own = await batchWith(svc().clientWith(tokenA), 10);
      const release = await holdBatchRow(holder(), batch.id);
      let ofB, again, madeUp;
      try {
        ofB = await ackAsA([...batch.ids.slice(0, 3), ...own.ids.slice(0, 2)]);
        again = await ackAsA(batch.ids.slice(3, 5)); // its owner now known to this replica
        madeUp = await ackAsA([madeUpId(0), madeUpId(1), madeUpId(2), ...own.ids.slice(2, 4)]);
      } finally {
        await release();
      }
      expect(ofB.status).toBe(200);
      expect(ofB.body).toEqual({ ...madeUp.body, rejected: batch.ids.slice(0, 3).map((id) => ({ id, reason: 'unknown_batch' })) });
      expect(ofB.body).toMatchObject({ acked: 2 });
      expect(again.body.rejected).toEqual(batch.ids.slice(3, 5).map((id) => ({ id, reason: 'unknown_batch' })));
      expect([ofB.ms, again.ms].every((ms) => ms < 1000)).toBe(true); // not after a wait for b's lock (LOCK_TIMEOUT 1 s)
      const asB = await svc().api.get(`/v1/batches/${batch.id}`).set('Authorization', `Bearer ${tokenB}`);
      expect(asB.body).toMatchObject({ state: 'sealed', succeeded: 0 });
    });

    it("when a acks items of it while b's own acks wait for its row, then a is answered at once and b's acks commit once the row is free", async () => {
      const batch = await batchWith(svc().clientWith(tokenB), 10);
      const release = await holdBatchRow(holder(), batch.id);
      let ofA;
      const bAcks = svc()
        .api.post('/v1/acks')
        .set('Authorization', `Bearer ${tokenB}`)
        .send({ ids: batch.ids.slice(5) })
        .then((res) => res);
      try {
        await until(async () => (await lockWaiters(observer(), isPostgresBackend(backend.name))) > 0);
        ofA = await ackAsA(batch.ids.slice(0, 5));
      } finally {
        await release();
      }
      expect([ofA.status, ofA.ms < 1000]).toEqual([200, true]);
      expect(ofA.body.rejected).toEqual(batch.ids.slice(0, 5).map((id) => ({ id, reason: 'unknown_batch' })));
      expect((await bAcks).body).toMatchObject({ acked: 5 });
    });
  });
});

/**
 * One merged round at a time (ACK_GROUP_COMMIT_CONCURRENCY 1): a's call naming only b's batch is
 * merged into a round with b's own call of it while b's row is held, and that round's lock wait fails.
 */
describeEachOrSkip(serverBackends())("another tenant's acks merged with acks of a batch whose row is locked (%s)", (_name, backend) => {
  const { svc, holder, observer } = lockedBatchSetup(backend, { ACK_GROUP_COMMIT_CONCURRENCY: '1' });
  let secondHolder: Knex;
  beforeAll(() => {
    secondHolder = otherConnections(svc().database);
  });
  afterAll(() => secondHolder.destroy());

  const ackAs = (token: string, ids: string[]) =>
    svc()
      .api.post('/v1/acks')
      .set('Authorization', `Bearer ${token}`)
      .send({ ids })
      .then((res) => res); // supertest sends on then()

  it("then a is answered 200 with b's IDs unknown_batch, not the 503 of b's lock", async () => {
    const [x, y] = [await batchWith(svc().clientWith(tokenB), 4), await batchWith(svc().clientWith(tokenB), 4)];
    const releases = [await holdBatchRow(holder(), y.id), await holdBatchRow(secondHolder, x.id)];
    let answers;
    try {
      const running = ackAs(tokenB, y.ids); // the one round in flight, waiting for y's row
      await until(async () => (await lockWaiters(observer(), isPostgresBackend(backend.name))) > 0);
      // The next round, together.
      answers = await Promise.all([running, ackAs(tokenB, x.ids.slice(0, 2)), ackAs(tokenA, x.ids.slice(2))]);
    } finally {
      for (const release of releases) await release();
    }
    const [ofY, ofX, ofA] = answers;
    expect([ofY.status, ofX.status]).toEqual([503, 503]);
    expect([ofA.status, ofA.body.rejected]).toEqual([200, x.ids.slice(2).map((id) => ({ id, reason: 'unknown_batch' }))]);
  });
});
