import { createRollcall } from '../../src/rollcall';
import { describeEachOrSkip, serverBackends, TestDatabase } from '../helpers/backends';
import { serve, TestApp } from '../helpers/service';
import { TcpProxy } from '../helpers/tcpProxy';

/**
 * Anyone may ask /readyz, and each check reads the database. Here the check's read hangs wherever it
 * runs (as one waiting behind a lock on the migrations' table would) while many probes arrive at
 * once: they share one check, so the pool's other connections stay free for the API.
 */
describeEachOrSkip(serverBackends())('many readiness probes at once while the check hangs (%s)', (_name, backend) => {
  let database: TestDatabase;
  let proxy: TcpProxy;
  let app: TestApp;
  beforeAll(async () => {
    database = await backend.create({ DB_POOL_SIZE: '3' });
    const url = new URL(database.config.DATABASE_URL as string);
    proxy = new TcpProxy(url.hostname, Number(url.port));
    await proxy.open();
    url.host = `127.0.0.1:${proxy.port}`;
    app = await serve(await createRollcall({ ...database.config, DATABASE_URL: url.toString() }));
  });
  afterAll(async () => {
    proxy.speak();
    await app.stop();
    await proxy.cut();
    await database.drop();
  });

  it('then batches still open and take items, and every probe is answered ready once the check goes on', async () => {
    const hung = proxy.freezeEveryConnectionSending('rollcall_migrations');
    const probes = Array.from({ length: 20 }, () => app.api.get('/readyz').then((res) => res.status)); // supertest sends on then()
    await hung;
    // Time for every probe to reach the service and ask for a connection, as it would without sharing.
    await new Promise((resolve) => setTimeout(resolve, 300));

    const opened = await app.api.post('/v1/batches').send({});
    const added = await app.api.post(`/v1/batches/${opened.body.id}/items`).send({ count: 10 });
    proxy.speak();
    expect([opened.status, added.status]).toEqual([201, 201]);
    expect(await Promise.all(probes)).toEqual(Array(20).fill(200));
  }, 30_000);
});
