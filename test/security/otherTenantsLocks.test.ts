import { Knex } from 'knex';

import { describeEachOrSkip, serverBackends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { holdBatchRow, otherConnections } from '../helpers/rowLocks';
import { startService, TestService } from '../helpers/service';

const TOKENS = [
  { token: 'tenant-a-token-0123456789', tenant: 'a', scopes: ['produce', 'read', 'consume'] },
  { token: 'tenant-b-token-0123456789', tenant: 'b', scopes: ['produce', 'read', 'consume'] },
];
const [tokenA, tokenB] = TOKENS.map((t) => t.token) as [string, string];

/**
 * Tenant b's batch row is locked (b's own long add, a stuck replica) while tenant a sends producer
 * calls naming that batch: a learns nothing of it (404, as for a batch that does not exist, not 503
 * after a lock wait, which says it does) and takes no part in b's lock.
 */
describeEachOrSkip(serverBackends())("another tenant's calls naming a batch whose row is locked (%s)", (_name, backend) => {
  let svc: TestService;
  let holder: Knex;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), LOCK_TIMEOUT: '1s' });
    holder = otherConnections(svc.database);
  });
  afterAll(async () => {
    await holder.destroy();
    await svc.stop();
  });

  it.each([
    ['seal', 'post', '/seal', {}],
    ['add', 'post', '/items', { count: 10 }],
    ['cancel', 'post', '/cancel', {}],
    ['delete', 'delete', '', undefined],
  ] as const)('when a calls %s on it, then a is answered 404 batch_not_found at once and the batch is as b left it', async (_call, method, path, body) => {
    const batch = await batchWith(svc.clientWith(tokenB), 10, { sealed: false });
    const release = await holdBatchRow(holder, batch.id);
    let res;
    const started = performance.now();
    try {
      const call = svc.api[method](`/v1/batches/${batch.id}${path}`).set('Authorization', `Bearer ${tokenA}`);
      res = await (body === undefined ? call : call.send(body));
    } finally {
      await release();
    }
    expect([res.status, res.body.error?.code]).toEqual([404, 'batch_not_found']);
    expect(performance.now() - started).toBeLessThan(1000); // not after a wait for b's lock (LOCK_TIMEOUT 1 s)
    const asB = await svc.api.get(`/v1/batches/${batch.id}`).set('Authorization', `Bearer ${tokenB}`);
    expect(asB.body).toMatchObject({ state: 'open', total: 10 });
  });
});
