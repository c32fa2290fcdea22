import knex, { Knex } from 'knex';

import { backends, describeEachOrSkip } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { untilLockWaited } from '../helpers/rowLocks';
import { startService, TestService } from '../helpers/service';

/**
 * A real deadlock on PostgreSQL's ack path (pgDriver.ts): another transaction holds a group row and
 * then asks for the batch row the ack holds. PostgreSQL aborts the waiter whose deadlock check runs
 * first; the other side's check is pushed past the test (deadlock_timeout), so the loser is the ack.
 */
// PostgreSQL only (TEST_PG_URL; .ci/run sets it): skipped, not an empty table, when it is not set.
const postgres = backends().filter(([name]) => name === 'pg');
const describeOnPostgres = describeEachOrSkip(postgres);

describeOnPostgres('an ack that loses a deadlock (%s)', (_name, backend) => {
  let svc: TestService;
  let other: Knex;
  beforeAll(async () => {
    svc = await startService(backend, { LOCK_TIMEOUT: '10s' });
    other = knex({ client: 'pg', connection: svc.database.config.DATABASE_URL, pool: { min: 0, max: 2 } });
  });
  afterAll(async () => {
    await other.destroy();
    await svc.stop();
  });

  const retries = async () => Number(/^rollcall_transaction_retries_total (\d+)$/m.exec((await svc.api.get('/metrics')).text)?.[1] ?? 0);

  it('when another transaction holds its group row and then waits for its batch row, then the ack runs again and applies once', async () => {
    const { id, ids } = await batchWith(svc.client, 2);
    const before = await retries();
    const trx = await other.transaction();
    await trx.raw("SET LOCAL deadlock_timeout = '60s'");
    await trx('item_groups').where({ batch_id: id }).forUpdate();

    const ack = svc.api
      .post('/v1/acks')
      .send({ ids: [ids[0]] })
      .then((res) => res);
    await untilLockWaited(other, true); // the ack holds the batch row and waits for the group row
    await trx('batches').where({ id }).forUpdate(); // granted once the ack is aborted as the deadlock's loser
    await trx.commit();

    const res = await ack;
    expect(res.status).toBe(200);
    expect(res.body.acked).toBe(1);
    expect(await retries()).toBe(before + 1);
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ succeeded: 1, pending: 1 });
  });
});
