import knex, { Knex } from 'knex';

import { loadConfig } from '../../src/config';
import { createRollcall } from '../../src/rollcall';
import { mysqlBackend } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { PrivateMariadb, privateMariadbAvailable } from '../helpers/privateMariadb';
import { until } from '../helpers/realTime';
import { Receiver } from '../helpers/receiver';
import { serve, TestApp } from '../helpers/service';

/** The rows of a MariaDB query run through knex. */
const rowsOf = <T>(result: unknown) => (result as [T[]])[0];

// With the MariaDB suite (TEST_MYSQL_URL), on a server of its own.
const describeOnMariadb = mysqlBackend() && privateMariadbAvailable() ? describe : describe.skip;

/**
 * MariaDB 11.6 turned `innodb_snapshot_isolation` on by default (11.8 LTS, Debian 13's MariaDB): in
 * REPEATABLE READ, a locking read of a row another transaction changed since this one's first plain
 * read fails with 1020 (ER_CHECKREAD) instead of reading the newest row. The sweep, the callback
 * claim and the child-outcome claim read plainly first and lock after. Sessions run READ COMMITTED,
 * where the switch does nothing, except on a server whose binary log is written statement by
 * statement: there they keep REPEATABLE READ (db.ts, readsCommitted). So the server here is such a
 * one, with the switch on from its start (MariaDB 10.11 has it, off by default).
 */
describeOnMariadb('on a MariaDB with snapshot isolation on, whose sessions keep REPEATABLE READ (binlog_format=STATEMENT)', () => {
  jest.setTimeout(60_000);
  const server = new PrivateMariadb(['--log-bin=binlog', '--binlog-format=STATEMENT', '--server-id=1', '--innodb-snapshot-isolation=ON']);
  let app: TestApp | undefined;
  let other: Knex | undefined;
  const receiver = new Receiver();
  beforeAll(async () => {
    await receiver.start();
    await server.start();
    const admin = knex({ client: 'mysql2', connection: { uri: server.url.replace('/rollcall', '/mysql') } as never, pool: { min: 0, max: 1 } });
    await admin.raw('CREATE DATABASE rollcall');
    await admin.destroy();
    app = await serve(await createRollcall(loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: server.url })));
    other = knex({ client: 'mysql2', connection: { uri: server.url } as never, pool: { min: 0, max: 2 } }); // another replica's connections
    const [global] = rowsOf<{ snapshot: number }>(await other.raw('SELECT @@GLOBAL.innodb_snapshot_isolation AS snapshot'));
    expect(global).toEqual({ snapshot: 1 });
  });
  afterAll(async () => {
    await other?.destroy();
    await app?.stop();
    await server.destroy();
    await receiver.stop();
  });

  /** Resolves once an UPDATE of `table` runs (waits for a row lock) on the test's database. */
  const untilUpdateRuns = (table: string) =>
    until(async () => {
      const sql = "SELECT count(*) AS n FROM information_schema.processlist WHERE db = DATABASE() AND command = 'Query' AND info LIKE ?";
      return Number(rowsOf<{ n: number }>(await other!.raw(sql, [`update \`${table}\`%`]))[0]?.n) > 0;
    });

  it('when a due callback is changed by another replica while this one claims it, then the claim waits and the callback is still delivered', async () => {
    const { id } = await batchWith(app!.client, 0, { callbackUrl: receiver.url }); // complete at once: its callback is due
    // Another replica holds the event (its own claim, about to record an attempt).
    const holder = await other!.transaction();
    try {
      await holder('outbox').where('batch_id', id).forUpdate();
      // This replica reads the due events plainly, then claims them with a conditional UPDATE, which waits.
      const delivering = app!.rollcall.dispatcher.deliverDue();
      await untilUpdateRuns('outbox');
      // The other replica's change commits: the event stays pending and due.
      await holder('outbox').where('batch_id', id).increment('attempts', 1);
      await holder.commit();
      expect(await delivering).toBe(1);
    } finally {
      if (!holder.isCompleted()) await holder.rollback();
    }
    expect(receiver.deliveries.map((d) => (JSON.parse(d.body) as { batch: { id: string } }).batch.id)).toEqual([id]);
  });

  it('when a due child outcome is changed by another replica while this one claims it, then the claim waits and the parent item is still acked', async () => {
    const parent = await batchWith(app!.client, 1);
    const child = await batchWith(app!.client, 1, { parentItem: parent.ids[0] });
    expect((await app!.api.post('/v1/acks').send({ ids: child.ids })).body.completed).toHaveLength(1); // its outcome is now due
    const holder = await other!.transaction();
    try {
      await holder('child_outcomes').where('batch_id', child.id).forUpdate();
      // This replica reads the due outcomes plainly, then claims them with a conditional UPDATE, which waits.
      const acking = app!.rollcall.childOutcomes.deliverDue();
      await untilUpdateRuns('child_outcomes');
      // The other replica's change commits: the outcome stays due.
      await holder('child_outcomes').where('batch_id', child.id).increment('attempts', 1);
      await holder.commit();
      await acking;
    } finally {
      if (!holder.isCompleted()) await holder.rollback();
    }
    expect((await app!.api.get(`/v1/batches/${parent.id}`)).body).toMatchObject({ state: 'complete', succeeded: 1 });
  });
});
