import knex, { Knex } from 'knex';
import request from 'supertest';

import { loadConfig } from '../../src/config';
import { callFromIds } from '../../src/domain/ackCall';
import { createServer } from '../../src/http/server';
import { createRollcall, Rollcall } from '../../src/rollcall';
import { AckCommitter } from '../../src/service/ackCommitter';
import { openDb, poolStats } from '../../src/store/db';
import { withMigrationLock } from '../../src/store/migrationLock';
import { Backend, describeEachOrSkip, isPostgresBackend, serverBackends, TestDatabase } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { realSleep, track, until } from '../helpers/realTime';
import { startService, TestService } from '../helpers/service';
import { TcpProxy } from '../helpers/tcpProxy';

const servers = serverBackends();
const describeOnServers = describeEachOrSkip(servers);

/** A TCP proxy in front of the database server of `url`. */
const proxyTo = (url: URL): TcpProxy => new TcpProxy(url.hostname, Number(url.port || (url.protocol === 'mysql:' ? 3306 : 5432)));

/** Opens a batch of 10 items; its first item's ID. */
async function batchOfTen(api: ReturnType<typeof request>): Promise<{ batch: { id: string }; id0: string }> {
  const batch = (await api.post('/v1/batches').send({})).body;
  const added = (await api.post(`/v1/batches/${batch.id}/items`).send({ count: 10 })).body;
  return { batch, id0: `${batch.id}:${added.groups[0].id}:0` };
}

/** A rollcall of its own that reaches a fresh test database through a TCP proxy, and how to end all three. */
interface BehindProxy {
  database: TestDatabase;
  proxy: TcpProxy;
  rollcall: Rollcall;
  end(): Promise<void>;
}

async function behindProxy(backend: Backend, settings: Record<string, string>): Promise<BehindProxy> {
  const database = await backend.create();
  const url = new URL(database.config.DATABASE_URL!);
  const proxy = proxyTo(url);
  await proxy.open();
  url.host = `127.0.0.1:${proxy.port}`;
  const rollcall = await createRollcall(loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: url.toString(), DB_POOLER: database.config.DB_POOLER, ...settings }));
  const end = async () => {
    proxy.speak();
    await proxy.cut();
    await rollcall.close();
    await database.drop();
  };
  return { database, proxy, rollcall, end };
}

describeOnServers('when the database goes away (%s)', (_name, backend) => {
  let setup: BehindProxy;
  let proxy: TcpProxy;
  let rollcall: Rollcall;

  beforeAll(async () => {
    setup = await behindProxy(backend!, { TX_RETRIES: '1' });
    ({ proxy, rollcall } = setup);
  });
  afterAll(() => setup.end());

  it('then requests get 503 unavailable, readiness fails, and service resumes when it is back', async () => {
    const api = request(createServer(rollcall.app));
    const { batch, id0 } = await batchOfTen(api);

    await proxy.cut();
    for (const res of [
      await api.get(`/v1/batches/${batch.id}`),
      await api.post('/v1/batches').send({}),
      await api.post(`/v1/batches/${batch.id}/items`).send({ count: 1 }),
      await api.post('/v1/acks').send({ ids: [id0] }),
      await api.post(`/v1/batches/${batch.id}/seal`),
      await api.get('/v1/batches'),
    ]) {
      expect(res.status).toBe(503);
      expect(res.body.error.code).toBe('unavailable');
    }
    expect((await api.get('/readyz')).status).toBe(503);
    expect((await api.get('/healthz')).status).toBe(200);

    await proxy.open();
    const deadline = Date.now() + 5000;
    let res = await api.post('/v1/acks').send({ ids: [id0] });
    while (res.status !== 200 && Date.now() < deadline) res = await api.post('/v1/acks').send({ ids: [id0] });
    expect(res.status).toBe(200);
    // The ack sent while the database was away was not applied: it is acked now, once.
    expect(res.body.acked).toBe(1);
    expect((await api.get(`/v1/batches/${batch.id}`)).body).toMatchObject({ succeeded: 1, total: 10 });
  });

  it('when the database host takes connections but never answers, then requests get 503 unavailable, not 500', async () => {
    const api = request(createServer(rollcall.app));
    const batch = (await api.post('/v1/batches').send({})).body;
    proxy.silence();
    try {
      for (const res of [await api.get(`/v1/batches/${batch.id}`), await api.post('/v1/batches').send({})]) {
        expect([res.status, res.body.error?.code]).toEqual([503, 'unavailable']);
      }
    } finally {
      proxy.speak();
    }
  }, 45_000);
});

describeEachOrSkip(servers.filter(([name]) => name === 'mysql' || name === 'pg'))(
  'when the database host freezes in the middle of a sweep (%s)',
  (name, backend) => {
    it('then the sweep ends 503 unavailable after about DB_QUERY_TIMEOUT, not when the host answers again, and for a while no other starts beside it', async () => {
      const database = await backend!.create();
      const url = new URL(database.config.DATABASE_URL!);
      const proxy = proxyTo(url);
      await proxy.open();
      const proxied = new URL(url.toString());
      proxied.host = `127.0.0.1:${proxy.port}`;
      const clock = { now: Date.UTC(2026, 10, 21, 12) };
      const rollcall = await createRollcall(
        loadConfig({
          LOG_LEVEL: 'silent',
          DATABASE_URL: proxied.toString(),
          COMPLETED_RETENTION: '0',
          SWEEP_INTERVAL: '0',
          GROUP_SIZE: '8',
          DB_QUERY_TIMEOUT: '1200ms',
          LOCK_TIMEOUT: '100ms',
        }),
        { now: () => clock.now },
      );
      const direct = openDb(database.config);
      try {
        const api = request(createServer(rollcall.app));
        const batch = (await api.post('/v1/batches').send({})).body;
        const added = (await api.post(`/v1/batches/${batch.id}/items`).send({ count: 16 })).body;
        await api.post(`/v1/batches/${batch.id}/seal`).send({});
        const ids = added.groups.flatMap((g: { id: string; size: number }) => Array.from({ length: g.size }, (_, i) => `${batch.id}:${g.id}:${i}`));
        expect((await api.post('/v1/acks').send({ ids })).body.completed).toHaveLength(1);
        // Each group row's delete takes 0.7 s, so the sweep is inside its delete when the host freezes.
        if (name === 'mysql') await direct.raw('CREATE TRIGGER slow_delete BEFORE DELETE ON item_groups FOR EACH ROW SET @slept = SLEEP(0.7)');
        else {
          await direct.raw('CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.7); RETURN OLD; END $$');
          await direct.raw('CREATE TRIGGER slow_delete BEFORE DELETE ON item_groups FOR EACH ROW EXECUTE FUNCTION slow_delete()');
        }
        clock.now += 1000;
        const started = Date.now();
        const sweeping = Promise.resolve(api.post('/v1/admin/sweep').send({}));
        await realSleep(1000);
        proxy.freeze();
        const answer = await Promise.race([sweeping, realSleep(15_000).then(() => null)]);
        expect(answer && [answer.status, answer.body.error?.code]).toEqual([503, 'unavailable']);
        expect(Date.now() - started).toBeLessThan(10_000);
        // The sweep left waiting on the frozen host: none starts beside it, the next asker is told at once.
        const asked = Date.now();
        const again = await api.post('/v1/admin/sweep').send({});
        expect([again.status, again.body.error?.message]).toEqual([503, expect.stringContaining('has not ended yet')]);
        expect(Date.now() - asked).toBeLessThan(1000);
        // Past three DB_QUERY_TIMEOUTs one starts anyway (a lost answer may hold the first for hours): it freezes too.
        await realSleep(3_700);
        const later = await api.post('/v1/admin/sweep').send({});
        expect([later.status, later.body.error?.message]).toEqual([503, expect.not.stringContaining('has not ended yet')]);
        proxy.speak();
        await sweeping;
        // Once the host answers, the sweep left running ends after its statement, and sweeps run again.
        await until(async () => (await api.post('/v1/admin/sweep').send({})).status === 200, 20_000);
        await until(async () => (await api.get(`/v1/batches/${batch.id}`)).status === 404, 20_000);
      } finally {
        proxy.speak();
        await direct.destroy();
        await proxy.cut();
        await rollcall.close();
        await database.drop();
      }
    }, 60_000);
  },
);

/** PostgreSQL servers whose sessions the test reaches: behind a pooler, server sessions outlive a change of the database's defaults. */
const postgresServers = servers.filter(([name]) => isPostgresBackend(name) && name !== 'pgbouncer');

describeEachOrSkip(postgresServers)('when the PostgreSQL database turns read-only, as a standby after a failover (%s)', (_name, backend) => {
  let database: TestDatabase;
  let rollcall: Rollcall;
  let admin: Knex;

  /** Sets the database's default for new sessions and ends the service's sessions, so its pool opens new ones. */
  const setReadOnly = async (on: boolean) => {
    await admin.raw('SET default_transaction_read_only = off'); // this session's own, set at its start
    await admin.raw(`ALTER DATABASE ${new URL(database.config.DATABASE_URL!).pathname.slice(1)} SET default_transaction_read_only = ${on ? 'on' : 'off'}`);
    await admin.raw('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');
  };

  beforeAll(async () => {
    database = await backend!.create();
    admin = knex({ client: 'pg', connection: database.config.DATABASE_URL, pool: { min: 0, max: 1 } });
    rollcall = await createRollcall(loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: database.config.DATABASE_URL, TX_RETRIES: '1' }));
  });
  afterAll(async () => {
    await rollcall.close();
    await admin.destroy();
    await database.drop();
  });

  it('then every write is 503 unavailable with Retry-After, changing nothing, readiness fails, reads go on, and writes resume when it takes them again', async () => {
    const api = request(createServer(rollcall.app));
    const { batch, id0 } = await batchOfTen(api);

    await setReadOnly(true);
    // Reads on the new sessions answer: the writes below meet a read-only session, not a lost connection.
    await until(async () => (await api.get(`/v1/batches/${batch.id}`)).status === 200);
    for (const res of [
      await api.post('/v1/batches').send({}),
      await api.post(`/v1/batches/${batch.id}/items`).send({ count: 1 }),
      await api.post('/v1/acks').send({ ids: [id0] }),
      await api.post(`/v1/batches/${batch.id}/seal`),
      await api.post(`/v1/batches/${batch.id}/cancel`),
    ]) {
      expect([res.status, res.body.error?.code, res.headers['retry-after']]).toEqual([503, 'unavailable', '1']);
    }
    expect((await api.get('/readyz')).status).toBe(503);
    expect((await api.get(`/v1/batches/${batch.id}`)).body).toMatchObject({ state: 'open', total: 10, succeeded: 0 });
    expect((await api.get('/v1/batches')).body.batches).toHaveLength(1);

    await setReadOnly(false);
    await until(async () => (await api.get('/readyz')).status === 200);
    expect((await api.post('/v1/acks').send({ ids: [id0] })).body).toMatchObject({ acked: 1 });
  }, 30_000);
});

/**
 * PostgreSQL servers on which a test can make COMMIT fail: a deferred constraint trigger reads a
 * local switch table. Not Citus: its shards' triggers run on the workers, which have no such table.
 */
const commitFaultServers = servers.filter(([name]) => isPostgresBackend(name) && name !== 'citus');

describeEachOrSkip(commitFaultServers)('when PostgreSQL refuses a COMMIT, as Citus does when it loses a worker mid-commit (%s)', (_name, backend) => {
  let svc: TestService;
  let api: ReturnType<typeof request>;

  /** Refuses the COMMIT of every transaction that writes a batch row, or of those that write `batchId`'s. */
  const refuseCommits = (refuse: { all: boolean; batchId?: string }) =>
    svc.rollcall.db('commit_fault').update({ refuse: refuse.all, refuse_batch: refuse.batchId ?? null });

  beforeAll(async () => {
    // A merge window, so that concurrent acks of several batches share a transaction.
    svc = await startService(backend!, { TX_RETRIES: '1', ACK_GROUP_COMMIT_WINDOW_MS: '20' });
    api = svc.api;
    const db = svc.rollcall.db;
    await db.raw('CREATE TABLE commit_fault (refuse boolean NOT NULL, refuse_batch text)');
    await db('commit_fault').insert({ refuse: false });
    // Checked at COMMIT, after every statement of the transaction succeeded: Citus's XX000 there.
    await db.raw(`CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF (SELECT refuse OR refuse_batch = NEW.id::text FROM commit_fault) THEN
          RAISE EXCEPTION 'could not commit transaction on any active node' USING ERRCODE = 'XX000';
        END IF;
        RETURN NULL;
      END $$`);
    await db.raw(
      'CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT OR UPDATE ON batches DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_commit()',
    );
  });
  afterAll(() => svc.stop());
  afterEach(() => refuseCommits({ all: false }));

  it('then an add, an ack, a seal and a cancel are 503 unavailable with Retry-After, not 500, changing nothing, and succeed when tried again once commits go through', async () => {
    const { batch, id0 } = await batchOfTen(api);

    await refuseCommits({ all: true });
    // Each a transaction whose statements succeed and whose COMMIT fails. (An open is one statement
    // that commits by itself: an error there is the statement's.)
    const writes = [
      () => api.post(`/v1/batches/${batch.id}/items`).send({ count: 1 }),
      () => api.post('/v1/acks').send({ ids: [id0] }),
      () => api.post(`/v1/batches/${batch.id}/seal`),
      () => api.post(`/v1/batches/${batch.id}/cancel`),
    ];
    for (const write of writes) {
      const res = await write();
      expect([res.status, res.body.error?.code, res.headers['retry-after']]).toEqual([503, 'unavailable', '1']);
    }
    expect((await api.get(`/v1/batches/${batch.id}`)).body).toMatchObject({ state: 'open', total: 10, succeeded: 0 });

    await refuseCommits({ all: false });
    for (const write of writes) expect((await write()).status).toBe(write === writes[0] ? 201 : 200);
    expect((await api.get(`/v1/batches/${batch.id}`)).body).toMatchObject({ state: 'cancelled', total: 11, succeeded: 1 });
  }, 30_000);

  it('when every COMMIT is refused, then a merged round of 20 calls costs three transactions, not one per call, and each call gets 503', async () => {
    const batches = await Promise.all(Array.from({ length: 20 }, () => batchWith(svc.client, 1)));
    // A committer of its own, whose window gathers all 20 calls into one round.
    const committer = new AckCommitter(svc.rollcall.deps, {
      windowMs: 100,
      waitWhenIdle: true,
      maxIds: 20_000,
      concurrency: 1,
      maxQueuedIds: 100_000,
      maxQueuedIdsPerTenant: 100_000,
    });
    await refuseCommits({ all: true });
    const answers = await Promise.allSettled(batches.map((b) => committer.submit(callFromIds(b.ids, 'succeeded'))));
    expect(answers.map((a) => (a.status === 'rejected' ? (a.reason as { code?: string }).code : 'answered'))).toEqual(batches.map(() => 'unavailable'));
    // The merged round, then two calls alone that fail as it did: the database fails every commit.
    expect(committer.stats).toEqual({ transactions: 3, calls: 20, ids: 20 });
  }, 30_000);

  it("when one batch's COMMIT is refused, then acks of other batches merged with it still commit", async () => {
    const refused = await batchWith(svc.client, 1);
    const others = await Promise.all(Array.from({ length: 8 }, () => batchWith(svc.client, 5)));
    await refuseCommits({ all: false, batchId: refused.id });
    // The refused call amid the others: the first call of all finds no round running and runs alone.
    const calls = others.flatMap((b) => b.ids.map((itemId) => ({ ids: [itemId] })));
    calls.splice(20, 0, { ids: refused.ids });
    const results = await Promise.all(calls.map((body) => api.post('/v1/acks').send(body)));
    expect(results.map((res) => res.status)).toEqual(calls.map((_, i) => (i === 20 ? 503 : 200)));
    for (const b of others) expect((await api.get(`/v1/batches/${b.id}`)).body).toMatchObject({ state: 'complete', succeeded: 5 });

    await refuseCommits({ all: false });
    expect((await api.post('/v1/acks').send({ ids: refused.ids })).body.completed).toHaveLength(1);
  }, 30_000);
});

const mysqlServers = servers.filter(([name]) => name === 'mysql');

describeEachOrSkip(mysqlServers)('when the MySQL/MariaDB server turns read-only for its users, as a replica after a failover (%s)', (_name, backend) => {
  const user = `rollcall_ro_${Date.now().toString(36)}`;
  let database: TestDatabase;
  let rollcall: Rollcall;
  let admin: Knex;

  /** `read_only` binds users without SUPER (READ_ONLY ADMIN): the service's user, not the other tests' root. */
  const setReadOnly = (on: boolean) => admin.raw(`SET GLOBAL read_only = ${on ? 'ON' : 'OFF'}`);

  beforeAll(async () => {
    database = await backend!.create();
    const url = new URL(database.config.DATABASE_URL!);
    admin = knex({ client: 'mysql2', connection: { uri: url.toString() } as never, pool: { min: 0, max: 1 } });
    await admin.raw("CREATE USER ??@'%' IDENTIFIED BY 'pw'", [user]);
    await admin.raw("GRANT ALL ON ??.* TO ??@'%'", [url.pathname.slice(1), user]);
    Object.assign(url, { username: user, password: 'pw' });
    rollcall = await createRollcall(loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: url.toString(), TX_RETRIES: '1' }));
  });
  afterAll(async () => {
    await setReadOnly(false);
    await rollcall.close();
    await admin.raw("DROP USER IF EXISTS ??@'%'", [user]);
    await admin.destroy();
    await database.drop();
  });

  it('then readiness fails and every write is 503 unavailable, changing nothing; both recover when it takes writes again', async () => {
    const api = request(createServer(rollcall.app));
    const { batch, id0 } = await batchOfTen(api);
    expect((await api.get('/readyz')).status).toBe(200);

    await setReadOnly(true);
    const ready = await api.get('/readyz');
    expect([ready.status, ready.body.error?.code]).toEqual([503, 'unavailable']);
    for (const res of [await api.post('/v1/batches').send({}), await api.post('/v1/acks').send({ ids: [id0] })])
      expect([res.status, res.body.error?.code]).toEqual([503, 'unavailable']);
    expect((await api.get(`/v1/batches/${batch.id}`)).body).toMatchObject({ state: 'open', total: 10, succeeded: 0 });

    await setReadOnly(false);
    expect((await api.get('/readyz')).status).toBe(200);
    expect((await api.post('/v1/acks').send({ ids: [id0] })).body).toMatchObject({ acked: 1 });
  }, 30_000);
});

describeOnServers('when the database stalls while clients wait for completion (%s)', (_name, backend) => {
  let setup: BehindProxy;
  let proxy: TcpProxy;
  let rollcall: Rollcall;

  beforeAll(async () => {
    setup = await behindProxy(backend!, { WAIT_POLL_INTERVAL: '10ms', DB_QUERY_TIMEOUT: '20s' });
    ({ proxy, rollcall } = setup);
  });
  afterAll(() => setup.end());

  it('then the shared poll does not pile up on the pool (one at a time), and the waiter is answered once it answers again', async () => {
    const api = request(createServer(rollcall.app));
    const { batch, id0 } = await batchOfTen(api);
    await api.post(`/v1/batches/${batch.id}/seal`);
    const waiting = api.get(`/v1/batches/${batch.id}/wait?timeout=30`).then((res) => res);
    await until(async () => rollcall.watcher.waiting === 1);

    proxy.freeze();
    await realSleep(500); // fifty 10 ms ticks of a poll that does not come back
    const pool = poolStats(rollcall.db)!;
    expect(pool.used + pool.pendingAcquires).toBeLessThanOrEqual(1);

    proxy.speak();
    const others = request(createServer(rollcall.app));
    const acked = await others.post('/v1/acks').send({ ids: [...Array(10).keys()].map((i) => id0.replace(/:0$/, `:${i}`)) });
    expect(acked.body).toMatchObject({ acked: 10 });
    expect((await waiting).body).toMatchObject({ state: 'complete' });
  }, 60_000);

  it('when one poll stays stuck on a connection that stopped answering, then after 5 s a poll beside it answers the waiter whose batch another replica completed', async () => {
    const api = request(createServer(rollcall.app));
    const other = await createRollcall(setup.database.config); // another replica, reaching the database directly
    let waiting: ReturnType<typeof track<request.Response>> | null = null;
    try {
      const { batch, id0 } = await batchOfTen(api);
      await api.post(`/v1/batches/${batch.id}/seal`);
      waiting = track(Promise.resolve(api.get(`/v1/batches/${batch.id}/wait?timeout=30`)));
      await until(async () => rollcall.watcher.waiting === 1);

      // The next shared poll asks for this batch; only its connection freezes, the pool's others go on answering.
      await proxy.freezeConnectionSending(batch.id);
      const frozenAt = Date.now();
      const ids = [...Array(10).keys()].map((i) => id0.replace(/:0$/, `:${i}`));
      expect((await request(createServer(other.app)).post('/v1/acks').send({ ids })).body.completed).toHaveLength(1);

      // The 10 ms ticks skip their turn while the stuck poll has run less than 5 s ...
      await realSleep(4000 - (Date.now() - frozenAt));
      expect(waiting.settled).toBe(false);
      // ... then one polls beside it and finds the batch complete, long before the wait's timeout.
      const late = new Promise<null>((resolve) => setTimeout(() => resolve(null), 8000 - (Date.now() - frozenAt)).unref());
      const answer = await Promise.race([waiting.promise, late]);
      expect(answer?.body.state ?? `no answer ${Date.now() - frozenAt} ms after the poll froze`).toBe('complete');
    } finally {
      proxy.speak();
      await waiting?.promise;
      await until(() => poolStats(rollcall.db)!.used === 0); // the stuck poll has its answer (not cut off by the teardown)
      await other.close();
    }
  }, 30_000);
});

describeOnServers('when the database stops answering on open connections (%s)', (_name, backend) => {
  const QUERY_TIMEOUT_MS = 1500;
  let setup: BehindProxy;
  let proxy: TcpProxy;
  let rollcall: Rollcall;

  beforeAll(async () => {
    setup = await behindProxy(backend!, { LOCK_TIMEOUT: '500ms', DB_QUERY_TIMEOUT: `${QUERY_TIMEOUT_MS}ms`, TX_RETRIES: '1' });
    ({ proxy, rollcall } = setup);
  });
  afterAll(() => setup.end());

  it('then requests get 503 unavailable after DB_QUERY_TIMEOUT instead of hanging, and service resumes when it answers again', async () => {
    const api = request(createServer(rollcall.app));
    const { batch, id0 } = await batchOfTen(api);
    // Warm connections in the pool, for the requests below to take.
    await Promise.all(Array.from({ length: 6 }, () => api.get(`/v1/batches/${batch.id}`)));

    proxy.freeze();
    const asked = [
      () => api.get(`/v1/batches/${batch.id}`),
      () => api.post('/v1/acks').send({ ids: [id0] }),
      () => api.post(`/v1/batches/${batch.id}/items`).send({ count: 1 }),
      () => api.post('/v1/batches').send({}),
      () => api.get('/readyz'),
    ];
    for (const ask of asked) {
      const started = Date.now();
      const res = await ask();
      // Each took a frozen connection (or found none answering: knex's 5 s wait for a new one).
      expect([res.status, res.body.error?.code]).toEqual([503, 'unavailable']);
      expect(Date.now() - started).toBeLessThan(QUERY_TIMEOUT_MS + 6000);
    }

    proxy.speak();
    const deadline = Date.now() + 10_000;
    let res = await api.post('/v1/acks').send({ ids: [id0] });
    while (res.status !== 200 && Date.now() < deadline) res = await api.post('/v1/acks').send({ ids: [id0] });
    expect(res.status).toBe(200);
    // A 503 may hide a commit whose answer was lost; the ack, sent again, still counts once.
    expect((await api.get(`/v1/batches/${batch.id}`)).body).toMatchObject({ succeeded: 1 });
    expect((await api.get('/readyz')).status).toBe(200);
  }, 90_000);
});

describeOnServers('when the answers of the database are lost and it never hears the service go (%s)', (_name, backend) => {
  let database: TestDatabase;
  let proxy: TcpProxy;
  let cutOff: Rollcall;
  let direct: Rollcall;

  beforeAll(async () => {
    database = await backend!.create();
    const url = new URL(database.config.DATABASE_URL!);
    proxy = proxyTo(url);
    await proxy.open();
    const directUrl = url.toString();
    url.host = `127.0.0.1:${proxy.port}`;
    const settings = { LOG_LEVEL: 'silent', DB_POOLER: database.config.DB_POOLER, LOCK_TIMEOUT: '500ms', DB_QUERY_TIMEOUT: '1500ms', TX_RETRIES: '1' };
    cutOff = await createRollcall(loadConfig({ ...settings, DATABASE_URL: url.toString() }));
    direct = await createRollcall(loadConfig({ ...settings, DATABASE_URL: directUrl }));
  });
  afterAll(async () => {
    await proxy.cut();
    await cutOff.close();
    await direct.close();
    await database.drop();
  });

  it('then the transaction its lost answer left open ends at the database too, and other replicas ack the batch again', async () => {
    const api = request(createServer(direct.app));
    const batch = (await api.post('/v1/batches').send({})).body;
    const added = (await api.post(`/v1/batches/${batch.id}/items`).send({ count: 10 })).body;
    const ids = Array.from({ length: 10 }, (_, i) => `${batch.id}:${added.groups[0].id}:${i}`);
    const cutOffApi = request(createServer(cutOff.app));
    expect((await cutOffApi.post('/v1/acks').send({ ids: [ids[0]] })).status).toBe(200); // a warm connection

    proxy.holdAnswers();
    // The database runs its locking reads (the batch's row is now held) but the answer never arrives.
    expect((await cutOffApi.post('/v1/acks').send({ ids: [ids[1]] })).status).toBe(503);

    // The other replica waits for that row only until the database ends the abandoned transaction.
    const started = Date.now();
    let res = await api.post('/v1/acks').send({ ids: [ids[2]] });
    while (res.status !== 200 && Date.now() - started < 15_000) res = await api.post('/v1/acks').send({ ids: [ids[2]] });
    expect(res.status).toBe(200);
    expect((await api.get(`/v1/batches/${batch.id}`)).body).toMatchObject({ succeeded: 2 });
  }, 60_000);
});

describeOnServers('when the database freezes while a replica starts (%s)', (_name, backend) => {
  it('when it freezes while the replica waits to migrate, then the start fails after DB_QUERY_TIMEOUT instead of hanging before it listens', async () => {
    const database = await backend.create();
    const direct = openDb(database.config);
    const url = new URL(database.config.DATABASE_URL!);
    const proxy = proxyTo(url);
    try {
      // Another replica holds the migration lock: this one waits for it on the migrations' pool,
      // which has no time limit (an index build takes what it takes).
      await withMigrationLock(direct, async () => undefined);
      await direct('rollcall_migration_lock').insert({ id: 1, owner: 'another replica', refreshed_at: Date.now() });
      await proxy.open();
      url.host = `127.0.0.1:${proxy.port}`;
      const starting = createRollcall(
        loadConfig({
          LOG_LEVEL: 'silent',
          DATABASE_URL: url.toString(),
          DB_POOLER: database.config.DB_POOLER,
          LOCK_TIMEOUT: '500ms',
          DB_QUERY_TIMEOUT: '1500ms',
        }),
      ).then(
        async (rollcall) => (await rollcall.close(), 'started'),
        (error: Error) => error.message,
      );
      // Frozen once it waits: its own pool and the migrations' pool both hold a connection.
      while (proxy.connections < 2) await new Promise((resolve) => setTimeout(resolve, 20));
      await new Promise((resolve) => setTimeout(resolve, 300));
      proxy.freeze();
      const frozenAt = Date.now();
      const late = new Promise<string>((resolve) => setTimeout(() => resolve('still starting 20 s after the freeze'), 20_000).unref());
      expect(await Promise.race([starting, late])).toMatch(/the database answered nothing for 1500 ms \(DB_QUERY_TIMEOUT\) while migrations ran/);
      // DB_QUERY_TIMEOUT and a ping's interval; a ping that must first connect adds the connect timeout (5 s).
      expect(Date.now() - frozenAt).toBeLessThan(9000);
    } finally {
      await proxy.cut();
      await direct.destroy();
      await database.drop();
    }
  }, 45_000);
});
