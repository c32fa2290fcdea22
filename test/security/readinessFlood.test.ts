import { describeEachOrSkip, serverBackends } from '../helpers/backends';
import { ProxiedService, startBehindProxy, startService } from '../helpers/service';
import { TcpProxy } from '../helpers/tcpProxy';

/**
 * Anyone may ask /readyz, and each check reads the database. Here the check's read hangs wherever it
 * runs (as one waiting behind a lock on the migrations' table would) while many probes arrive at
 * once: they share one check, so the pool's other connections stay free for the API.
 */
describeEachOrSkip(serverBackends())('many readiness probes at once while the check hangs (%s)', (_name, backend) => {
  let app: ProxiedService;
  let proxy: TcpProxy;
  beforeAll(async () => {
    app = await startBehindProxy(backend, { DB_POOL_SIZE: '3' });
    proxy = app.proxy;
  });
  afterAll(() => app.stop());

  it('then batches still open and take items, and every probe is answered ready once the check goes on', async () => {
    const hung = proxy.freezeEveryConnectionSending('rollcall_migrations');
    const probes: Array<Promise<number>> = [];
    // Three waves, each past the time probes share one check: each would start a check of its own.
    for (let wave = 0; wave < 3; wave++) {
      probes.push(...Array.from({ length: 20 }, () => app.api.get('/readyz').then((res) => res.status))); // supertest sends on then()
      if (wave === 0) await hung;
      // Time for every probe to reach the service and ask for a connection, as it would without sharing.
      await new Promise((resolve) => setTimeout(resolve, 1_100));
    }

    const opened = await app.api.post('/v1/batches').send({});
    const added = await app.api.post(`/v1/batches/${opened.body.id}/items`).send({ count: 10 });
    proxy.speak();
    expect([opened.status, added.status]).toEqual([201, 201]);
    expect(await Promise.all(probes)).toEqual(Array(60).fill(200));
  }, 30_000);

  it('when one check is stuck on a connection that stopped answering, then probes a second later are answered by a check of their own', async () => {
    const stuck = proxy.freezeConnectionSending('rollcall_migrations');
    const first = app.api.get('/readyz').then((res) => res.status);
    await stuck;
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const later = await app.api.get('/readyz');
    proxy.speak();
    expect(later.status).toBe(200);
    expect(await first).toBe(200);
  }, 30_000);
});

describeEachOrSkip(serverBackends())('a readiness probe while every pooled connection is busy (%s)', (_name, backend) => {
  it('then it is answered ready at once: it asks the database, not for a connection of the pool', async () => {
    const svc = await startService(backend, { DB_POOL_SIZE: '2' });
    const held = await Promise.all([0, 1].map(() => svc.rollcall.db.client.acquireConnection() as Promise<unknown>));
    try {
      const started = performance.now();
      const probe = await svc.api.get('/readyz');
      expect({ status: probe.status, atOnce: performance.now() - started < 2_000 }).toEqual({ status: 200, atOnce: true });
    } finally {
      for (const connection of held) await svc.rollcall.db.client.releaseConnection(connection);
      await svc.stop();
    }
  }, 30_000);
});
