import knex from 'knex';

import { createPgDatabase, mysqlBackend, pgBackend } from '../helpers/backends';
import { PrivateMariadb, privateMariadbAvailable } from '../helpers/privateMariadb';
import { PrivatePostgres, privatePostgresAvailable } from '../helpers/privatePostgres';
import { call, ServiceProcess, spawnService } from '../helpers/processes';
import { chunks, itemIds, shuffled } from '../helpers/service';

/** A database server of the test's own that it may stop and start, and the URL of a fresh database on it. */
interface PrivateServer {
  start(): Promise<void>;
  stop(signal?: NodeJS.Signals): Promise<void>;
  destroy(): Promise<void>;
  createDatabase(): Promise<string>;
}

function privateMariadb(): PrivateServer {
  const mariadb = new PrivateMariadb();
  return Object.assign(mariadb, {
    async createDatabase() {
      const admin = knex({ client: 'mysql2', connection: { uri: mariadb.url.replace('/rollcall', '/mysql') } as never, pool: { min: 0, max: 1 } });
      await admin.raw('CREATE DATABASE rollcall');
      await admin.destroy();
      return mariadb.url;
    },
  });
}

function privatePostgres(): PrivateServer {
  const postgres = new PrivatePostgres();
  return Object.assign(postgres, { createDatabase: async () => (await createPgDatabase(postgres.url)).url });
}

/**
 * Whether a server of the test's own can be started for an enabled backend. Under CI a backend
 * enabled without its server's programs fails the run: its half of the test would go unnoticed.
 */
function canStart(enabled: boolean, name: string, available: () => boolean): boolean {
  if (!enabled) return false;
  if (available()) return true;
  if (process.env.CI) throw new Error(`${name}'s server programs are not installed: the restart test cannot run on a ${name} of its own`);
  return false;
}

// Runs with the MariaDB suite (TEST_MYSQL_URL) and the PostgreSQL suite (TEST_PG_URL), each on a server of its own.
const servers: Array<[string, () => PrivateServer]> = [
  ...(canStart(mysqlBackend() !== null, 'MariaDB', privateMariadbAvailable) ? [['MariaDB', privateMariadb] as [string, () => PrivateServer]] : []),
  ...(canStart(pgBackend() !== null, 'PostgreSQL', privatePostgresAvailable) ? [['PostgreSQL', privatePostgres] as [string, () => PrivateServer]] : []),
];
const describeOnServers = servers.length > 0 ? describe.each(servers) : describe.skip.each([['none', privateMariadb]]);

describeOnServers('%s stopped and restarted under load', (name, makeServer) => {
  jest.setTimeout(180_000);
  const server = makeServer();
  let service: ServiceProcess;
  beforeAll(async () => {
    await server.start();
    service = await spawnService({ DATABASE_URL: await server.createDatabase(), DB_POOL_SIZE: '4' });
  });
  afterAll(async () => {
    await service?.stop();
    await server.destroy();
  });

  it('when the database goes down and comes back, then 503 meanwhile, back within 5 s, no ack lost', async () => {
    const id = (await call(`${service.url}/v1/batches`, 'POST', {})).body.id;
    const added = await call(`${service.url}/v1/batches/${id}/items`, 'POST', { count: 60_000 });
    await call(`${service.url}/v1/batches/${id}/seal`, 'POST', {});
    const ids = itemIds(id, added.body.groups);
    const queue = chunks(shuffled(ids, 4), 100);

    const tally = { sent: 0, ok: 0, unavailable: 0, other: 0 };
    const answeredOk: string[] = [];
    let completions = 0;
    let restarting = false;
    let firstOkSinceRestart = 0;
    let stopLoad = false;
    // The database is stopped once 100 of the 600 requests are answered, and no client takes another chunk until it
    // is: a fast machine answers all 600 in under half a second, and the outage must find acks still to send.
    let databaseStopped = () => {};
    const stopped = new Promise<void>((resolve) => (databaseStopped = resolve));
    const client = async () => {
      while (!stopLoad && queue.length > 0) {
        if (tally.ok >= 100) await stopped;
        const chunk = queue.shift();
        if (!chunk) break;
        tally.sent += 1;
        const res = await call(`${service.url}/v1/acks`, 'POST', { ids: chunk }).catch(() => ({ status: 0, body: null }));
        if (res.status === 200) {
          tally.ok += 1;
          if (restarting && firstOkSinceRestart === 0) firstOkSinceRestart = Date.now();
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

    while (tally.ok < 100) await new Promise((r) => setTimeout(r, 5));
    await server.stop('SIGTERM');
    databaseStopped();
    await new Promise((r) => setTimeout(r, 2000));
    expect(service.child.exitCode).toBeNull(); // still running
    const okWhileDown = tally.ok;
    await new Promise((r) => setTimeout(r, 500));
    expect(tally.ok).toBe(okWhileDown); // nothing was answered 200 while the database was away
    expect(tally.unavailable).toBeGreaterThan(0);
    const readyWhileDown = await call(`${service.url}/readyz`, 'GET');
    expect(readyWhileDown.status).toBe(503);

    // The service may be served between the server's first accepted connection and start()'s next poll: the first
    // 200 since the start began counts, and a 200 before start() returned counts as served at once.
    restarting = true;
    await server.start();
    const backAt = Date.now();
    while (firstOkSinceRestart === 0 && Date.now() - backAt < 10_000) await new Promise((r) => setTimeout(r, 20));
    expect(firstOkSinceRestart).toBeGreaterThan(0);
    const recoveryMs = Math.max(0, firstOkSinceRestart - backAt);
    expect(recoveryMs).toBeLessThan(5000);

    await load;
    stopLoad = true;
    const final = (await call(`${service.url}/v1/batches/${id}`, 'GET')).body;
    expect(final).toMatchObject({ state: 'complete', succeeded: 60_000, pending: 0 });
    expect(new Set(answeredOk).size).toBe(60_000);
    expect(completions).toBe(1);
    expect(tally.other).toBe(0);
    console.log(
      `database restart: ${tally.sent} ack requests, ${tally.ok} answered 200, ${tally.unavailable} answered 503 while ${name} was down, served again ${recoveryMs} ms after it came back; lost acks: 0`,
    );
  });
});
