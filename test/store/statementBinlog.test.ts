import knex from 'knex';

import { loadConfig } from '../../src/config';
import { createRollcall } from '../../src/rollcall';
import { mysqlBackend } from '../helpers/backends';
import { PrivateMariadb, privateMariadbAvailable } from '../helpers/privateMariadb';
import { serve, TestApp } from '../helpers/service';

// With the MariaDB suite (TEST_MYSQL_URL), on a server of its own: the shared one writes no binary log.
const describeOnMariadb = mysqlBackend() && privateMariadbAvailable() ? describe : describe.skip;

/**
 * A server that writes its binary log statement by statement refuses InnoDB writes under READ
 * COMMITTED (1665), the level every other session runs at (db.ts, readsCommitted): there sessions
 * keep the server's own level.
 */
describeOnMariadb('a MariaDB that writes its binary log statement by statement (binlog_format=STATEMENT)', () => {
  jest.setTimeout(60_000);
  const server = new PrivateMariadb(['--log-bin=binlog', '--binlog-format=STATEMENT', '--server-id=1']);
  let app: TestApp;
  beforeAll(async () => {
    await server.start();
    const admin = knex({ client: 'mysql2', connection: { uri: server.url.replace('/rollcall', '/mysql') } as never, pool: { min: 0, max: 1 } });
    await admin.raw('CREATE DATABASE rollcall');
    await admin.destroy();
    app = await serve(await createRollcall(loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: server.url })));
  });
  afterAll(async () => {
    await app?.stop();
    await server.destroy();
  });

  it('when a batch is opened, filled, acked and sealed, then it completes as on any server', async () => {
    const opened = await app.api.post('/v1/batches').send({ metadata: { job: 'binlog' } });
    expect(opened.status).toBe(201);
    const added = await app.api.post(`/v1/batches/${opened.body.id}/items`).send({ count: 3 });
    expect(added.status).toBe(201);
    const ids = [0, 1, 2].map((i) => `${opened.body.id}:${added.body.groups[0].id}:${i}`);
    const acked = await app.api.post('/v1/acks').send({ ids: ids.slice(0, 2) });
    expect(acked.status).toBe(200);
    expect((await app.api.post('/v1/acks').send({ ids: [ids[2]], outcome: 'failed', error: 'disk full' })).status).toBe(200);
    const sealed = await app.api.post(`/v1/batches/${opened.body.id}/seal`).send({});
    expect(sealed.body).toMatchObject({ state: 'complete', succeeded: 2, failed: 1, pending: 0 });
  });
});
