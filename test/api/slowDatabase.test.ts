import { onCitus } from '../../src/store/db';
import { profileOf } from '../../src/store/dialect';
import { describeEachOrSkip, serverBackends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

describeEachOrSkip(serverBackends())('when a statement of the sweeper takes longer than DB_QUERY_TIMEOUT (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { GROUP_SIZE: '8', COMPLETED_RETENTION: '0', SWEEP_INTERVAL: '0', LOCK_TIMEOUT: '100ms', DB_QUERY_TIMEOUT: '1200ms' });
  });
  afterAll(async () => {
    await svc.stop();
  });

  /** Deleting a group row takes 0.7 s: a delete of two is longer than the limit, as one of millions of rows is. */
  async function slowGroupDeletes(): Promise<void> {
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

  it('then the sweep still removes the due batch (it was rolled back and chosen again at every sweep)', async () => {
    const batch = await batchWith(svc.client, 16); // two groups
    expect((await svc.client.ack(batch.ids)).completed).toHaveLength(1);
    await slowGroupDeletes();
    svc.clock.now += 1000;
    expect(await svc.rollcall.sweep()).toEqual({ batchesRemoved: 1, groupsRemoved: 2 });
    await expect(svc.client.status(batch.id)).rejects.toMatchObject({ status: 404 });
  }, 30_000);
});
