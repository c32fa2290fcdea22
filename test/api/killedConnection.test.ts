import { openDb } from '../../src/store/db';
import { profileOf } from '../../src/store/dialect';
import { describeEachOrSkip, serverBackends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { until } from '../helpers/realTime';
import { startService } from '../helpers/service';

describeEachOrSkip(serverBackends().filter(([name]) => name === 'mysql' || name === 'pg'))(
  'when an operator kills the database connection of a request under way (%s)',
  (_name, backend) => {
    it('then the request is 503 unavailable, not 500, and sent again it is applied once', async () => {
      const svc = await startService(backend, { LOCK_TIMEOUT: '3s' });
      const operator = openDb(svc.database.config);
      try {
        const made = await batchWith(svc.client, 4);
        const mysql = profileOf(operator).name === 'mysql';
        // The batch's row is held, so the ack's statement is under way (waiting for it) when its connection is killed.
        const holder = await operator.transaction();
        await holder('batches').where('id', made.id).forUpdate();
        const waiting = async (): Promise<number[]> => {
          const sql = mysql
            ? "SELECT ID AS id FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND COMMAND = 'Query' AND ID <> CONNECTION_ID()"
            : "SELECT pid AS id FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
          const result = (await operator.raw(sql)) as [Array<{ id: number }>] | { rows: Array<{ id: number }> };
          return (Array.isArray(result) ? result[0] : result.rows).map((row) => Number(row.id));
        };
        const acking = Promise.resolve(svc.api.post('/v1/acks').send({ ids: made.ids.slice(0, 1) }));
        let victims: number[] = [];
        await until(async () => (victims = await waiting()).length > 0);
        for (const id of victims) await operator.raw(mysql ? `KILL CONNECTION ${id}` : `SELECT pg_terminate_backend(${id})`);
        const answer = await acking;
        await holder.rollback();
        expect([answer.status, answer.body.error?.code]).toEqual([503, 'unavailable']);
        const again = await svc.api.post('/v1/acks').send({ ids: made.ids.slice(0, 1) });
        expect([again.status, again.body.acked + again.body.duplicates]).toEqual([200, 1]);
        expect((await svc.api.get(`/v1/batches/${made.id}`)).body).toMatchObject({ succeeded: 1, pending: 3 });
      } finally {
        await operator.destroy();
        await svc.stop();
      }
    }, 30_000);
  },
);
