import knex from 'knex';

import { mysqlBackend } from '../helpers/backends';
import { PrivateMariadb, privateMariadbAvailable } from '../helpers/privateMariadb';
import { call, ServiceProcess, spawnService } from '../helpers/processes';
import { chunks, itemIds, shuffled } from '../helpers/service';

// Runs with the MariaDB suite (TEST_MYSQL_URL), on a MariaDB server of its own.
const describeOnMysql = mysqlBackend() && privateMariadbAvailable() ? describe : describe.skip;

describeOnMysql('MariaDB stopped and restarted under load', () => {
  jest.setTimeout(180_000);
  const mariadb = new PrivateMariadb();
  let service: ServiceProcess;
  beforeAll(async () => {
    await mariadb.start();
    const admin = knex({ client: 'mysql2', connection: { uri: mariadb.url.replace('/rollcall', '/mysql') } as never, pool: { min: 0, max: 1 } });
    await admin.raw('CREATE DATABASE rollcall');
    await admin.destroy();
    service = await spawnService({ DATABASE_URL: mariadb.url, DB_POOL_SIZE: '4' });
  });
  afterAll(async () => {
    await service?.stop();
    await mariadb.destroy();
  });

  it('when the database goes down and comes back, then the service answers 503 meanwhile, never crashes, serves again within 5 s and loses no ack', async () => {
    const id = (await call(`${service.url}/v1/batches`, 'POST', {})).body.id;
    const added = await call(`${service.url}/v1/batches/${id}/items`, 'POST', { count: 60_000 });
    await call(`${service.url}/v1/batches/${id}/seal`, 'POST', {});
    const ids = itemIds(id, added.body.groups);
    const queue = chunks(shuffled(ids, 4), 100);

    const tally = { sent: 0, ok: 0, unavailable: 0, other: 0 };
    const answeredOk: string[] = [];
    let completions = 0;
    let lastOkAt = 0;
    let stopLoad = false;
    const client = async () => {
      while (!stopLoad && queue.length > 0) {
        const chunk = queue.shift()!;
        tally.sent += 1;
        const res = await call(`${service.url}/v1/acks`, 'POST', { ids: chunk }).catch(() => ({ status: 0, body: null }));
        if (res.status === 200) {
          tally.ok += 1;
          lastOkAt = Date.now();
          answeredOk.push(...chunk);
          completions += res.body.completed.length;
        } else {
          if (res.status === 503 && res.body?.error?.code === 'unavailable') tally.unavailable += 1;
          else tally.other += 1;
          queue.push(chunk); // a client retries what was not answered 200
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    };
    const load = Promise.all(Array.from({ length: 8 }, client));

    await new Promise((r) => setTimeout(r, 500));
    await mariadb.stop('SIGTERM');
    await new Promise((r) => setTimeout(r, 2000));
    expect(service.child.exitCode).toBeNull(); // still running
    const okWhileDown = tally.ok;
    await new Promise((r) => setTimeout(r, 500));
    expect(tally.ok).toBe(okWhileDown); // nothing was answered 200 while the database was away
    expect(tally.unavailable).toBeGreaterThan(0);
    const readyWhileDown = await call(`${service.url}/readyz`, 'GET');
    expect(readyWhileDown.status).toBe(503);

    await mariadb.start();
    const backAt = Date.now();
    while (lastOkAt < backAt && Date.now() - backAt < 10_000) await new Promise((r) => setTimeout(r, 20));
    const recoveryMs = lastOkAt - backAt;
    expect(recoveryMs).toBeGreaterThanOrEqual(0);
    expect(recoveryMs).toBeLessThan(5000);

    await load;
    stopLoad = true;
    const final = (await call(`${service.url}/v1/batches/${id}`, 'GET')).body;
    expect(final).toMatchObject({ state: 'complete', succeeded: 60_000, pending: 0 });
    expect(new Set(answeredOk).size).toBe(60_000);
    expect(completions).toBe(1);
    expect(tally.other).toBe(0);
    console.log(
      `database restart: ${tally.sent} ack requests, ${tally.ok} answered 200, ${tally.unavailable} answered 503 while MariaDB was down, served again ${recoveryMs} ms after it came back; lost acks: 0`,
    );
  });
});
