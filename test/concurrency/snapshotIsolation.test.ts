import knex, { Knex } from 'knex';

import { describeEachOrSkip, mysqlBackend } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { until } from '../helpers/realTime';
import { Receiver } from '../helpers/receiver';
import { otherConnections } from '../helpers/rowLocks';
import { startService, TestService } from '../helpers/service';

/** The rows of a MariaDB query run through knex. */
const rowsOf = <T>(result: unknown) => (result as [T[]])[0];

/**
 * MariaDB 11.6 turned `innodb_snapshot_isolation` on by default (11.8 LTS, Debian 13's MariaDB): in
 * REPEATABLE READ, a locking read of a row another transaction changed since this one's first plain
 * read fails with 1020 (ER_CHECKREAD) instead of reading the newest row. The sweep, the callback
 * claim and the child-outcome claim read plainly first and lock after. MariaDB 10.11 has the switch,
 * off by default: it is turned on here for the service's sessions, as 11.6's default would have it.
 */
describeEachOrSkip(mysqlBackend() ? [['mariadb', mysqlBackend()!] as const] : [])('on a MariaDB with snapshot isolation on (%s)', (_name, backend) => {
  let svc: TestService | undefined;
  let other: Knex | undefined;
  /** The server's setting before the test: set back afterwards, whatever failed in between. */
  let before: string | undefined;
  const receiver = new Receiver();
  /** A connection to the server of TEST_MYSQL_URL, for its global settings. */
  const onServer = async <T>(work: (server: Knex) => Promise<T>): Promise<T> => {
    const server = knex({ client: 'mysql2', connection: { uri: process.env.TEST_MYSQL_URL } as never, pool: { min: 0, max: 1 } });
    try {
      return await work(server);
    } finally {
      await server.destroy();
    }
  };
  beforeAll(async () => {
    await receiver.start();
    // Before the service starts: its sessions take the server's default when they open.
    before = await onServer(async (server) => {
      const value = rowsOf<{ value: string }>(await server.raw('SELECT @@GLOBAL.innodb_snapshot_isolation AS value'))[0]!.value;
      await server.raw('SET GLOBAL innodb_snapshot_isolation = ON');
      return value;
    });
    svc = await startService(backend);
    other = otherConnections(svc.database, 2);
  });
  afterAll(async () => {
    if (before !== undefined) await onServer((server) => server.raw(`SET GLOBAL innodb_snapshot_isolation = ${Number(before) ? 'ON' : 'OFF'}`));
    await other?.destroy();
    await svc?.stop();
    await receiver.stop();
  });

  /** Resolves once an UPDATE of `table` runs (waits for a row lock) on the test's database. */
  const untilUpdateRuns = (table: string) =>
    until(async () => {
      const sql = "SELECT count(*) AS n FROM information_schema.processlist WHERE db = DATABASE() AND command = 'Query' AND info LIKE ?";
      return Number(rowsOf<{ n: number }>(await other!.raw(sql, [`update \`${table}\`%`]))[0]?.n) > 0;
    });

  it('when a due callback is changed by another replica while this one claims it, then the claim waits and the callback is still delivered', async () => {
    const { id } = await batchWith(svc!.client, 0, { callbackUrl: receiver.url }); // complete at once: its callback is due
    // Another replica holds the event (its own claim, about to record an attempt).
    const holder = await other!.transaction();
    try {
      await holder('outbox').where('batch_id', id).forUpdate();
      // This replica reads the due events plainly, then claims them with a conditional UPDATE, which waits.
      const delivering = svc!.rollcall.dispatcher.deliverDue();
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
    const parent = await batchWith(svc!.client, 1);
    const child = await batchWith(svc!.client, 1, { parentItem: parent.ids[0] });
    expect((await svc!.api.post('/v1/acks').send({ ids: child.ids })).body.completed).toHaveLength(1); // its outcome is now due
    const holder = await other!.transaction();
    try {
      await holder('child_outcomes').where('batch_id', child.id).forUpdate();
      // This replica reads the due outcomes plainly, then claims them with a conditional UPDATE, which waits.
      const acking = svc!.rollcall.childOutcomes.deliverDue();
      await untilUpdateRuns('child_outcomes');
      // The other replica's change commits: the outcome stays due.
      await holder('child_outcomes').where('batch_id', child.id).increment('attempts', 1);
      await holder.commit();
      await acking;
    } finally {
      if (!holder.isCompleted()) await holder.rollback();
    }
    expect((await svc!.api.get(`/v1/batches/${parent.id}`)).body).toMatchObject({ state: 'complete', succeeded: 1 });
  });
});
