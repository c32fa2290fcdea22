import { lockBatch } from '../../src/store/batches';
import { onCitus, openDb } from '../../src/store/db';
import { profileOf } from '../../src/store/dialect';
import { describeEachOrSkip, serverBackends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { ProxiedService, startBehindProxy, startService, TestApp, TestService } from '../helpers/service';

/** Deleting a group row takes 0.7 s: a delete of two is longer than the limit, as one of millions of rows is. */
async function slowGroupDeletes(svc: TestApp): Promise<void> {
  const db = svc.rollcall.db;
  if (profileOf(db).name === 'mysql') await db.raw('CREATE TRIGGER slow_delete BEFORE DELETE ON item_groups FOR EACH ROW SET @slept = SLEEP(0.7)');
  else {
    await db.raw('CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.7); RETURN OLD; END $$');
    // Citus refuses triggers on distributed tables unless told they are safe (this one only sleeps).
    const citus = await onCitus(db);
    await db.transaction(async (trx) => {
      if (citus) await trx.raw('SET LOCAL citus.enable_unsafe_triggers = on');
      await trx.raw('CREATE TRIGGER slow_delete BEFORE DELETE ON item_groups FOR EACH ROW EXECUTE FUNCTION slow_delete()');
    });
  }
}

describeEachOrSkip(serverBackends())('when a statement of the sweeper takes longer than DB_QUERY_TIMEOUT (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { GROUP_SIZE: '8', COMPLETED_RETENTION: '0', SWEEP_INTERVAL: '0', LOCK_TIMEOUT: '100ms', DB_QUERY_TIMEOUT: '1200ms' });
  });
  afterAll(async () => {
    await svc.stop();
  });

  it('then the sweep still removes the due batch (it was rolled back and chosen again at every sweep)', async () => {
    const batch = await batchWith(svc.client, 16); // two groups
    expect((await svc.client.ack(batch.ids)).completed).toHaveLength(1);
    await slowGroupDeletes(svc);
    svc.clock.now += 1000;
    expect(await svc.rollcall.sweep()).toEqual({ batchesRemoved: 1, groupsRemoved: 2 });
    await expect(svc.client.status(batch.id)).rejects.toMatchObject({ status: 404 });
  }, 30_000);
});

describeEachOrSkip(serverBackends())('when a sweep’s replica goes silent mid-chunk (%s)', (_name, backend) => {
  let svc: ProxiedService;
  beforeAll(async () => {
    svc = await startBehindProxy(backend, { COMPLETED_RETENTION: '0', SWEEP_INTERVAL: '0', DB_QUERY_TIMEOUT: '2s', LOCK_TIMEOUT: '1s' });
  });
  afterAll(() => svc.stop());

  it('then the server ends its transaction once idle for DB_QUERY_TIMEOUT, and the batch rows it locked are free again', async () => {
    const batch = await batchWith(svc.client, 3);
    expect((await svc.client.ack(batch.ids)).completed).toHaveLength(1);
    await new Promise((resolve) => setTimeout(resolve, 5)); // completed before the cutoff
    // The chunk's delete of idempotency records reaches the database; its answer, and all after, are held.
    const silent = svc.proxy.freezeConnectionSending('add_requests');
    const sweeping = svc.rollcall.sweep().catch((error: unknown) => error);
    await silent;
    const direct = openDb({ ...svc.database.config, LOCK_TIMEOUT: 10_000, DB_QUERY_TIMEOUT: 0 });
    try {
      const started = performance.now();
      const locked = await direct.transaction((trx) => lockBatch(trx, batch.id));
      expect(locked).toMatchObject({ id: batch.id }); // the sweep's transaction was rolled back
      expect(performance.now() - started).toBeLessThan(8_000); // before, the lock wait's 10 s ran out
    } finally {
      await direct.destroy();
      svc.proxy.speak();
      await sweeping;
    }
  }, 30_000);
});

describeEachOrSkip(serverBackends())('when the service’s pool is busy through a long sweep (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, {
      GROUP_SIZE: '8',
      COMPLETED_RETENTION: '0',
      SWEEP_INTERVAL: '0',
      DB_POOL_SIZE: '2',
      DB_QUERY_TIMEOUT: '1500ms',
      LOCK_TIMEOUT: '500ms',
    });
  });
  afterAll(async () => {
    await svc.stop();
  });

  it('then the sweep is not taken for one under a frozen database: it ends, and removes what is due', async () => {
    const batch = await batchWith(svc.client, 80); // ten groups: a 7-s delete below
    expect((await svc.client.ack(batch.ids)).completed).toHaveLength(1);
    expect(await svc.rollcall.sweep()).toEqual({ batchesRemoved: 0, groupsRemoved: 0 }); // (the clock has not moved)
    await slowGroupDeletes(svc);
    svc.clock.now += 1000;
    // Every connection of the service's pool taken, as by requests waiting on a lock held elsewhere.
    const pool = svc.rollcall.db.client as { acquireConnection(): Promise<unknown>; releaseConnection(c: unknown): Promise<unknown> };
    const taken = [await pool.acquireConnection(), await pool.acquireConnection()];
    try {
      expect(await svc.rollcall.sweep()).toEqual({ batchesRemoved: 1, groupsRemoved: 10 });
    } finally {
      for (const connection of taken) await pool.releaseConnection(connection);
    }
    await expect(svc.client.status(batch.id)).rejects.toMatchObject({ status: 404 });
  }, 60_000);
});
