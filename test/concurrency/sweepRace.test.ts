import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { startReplica, startService, TestApp } from '../helpers/service';

const DAY = 86_400_000;

/** Runs `run` over `work` with `clients` of them in flight at once; results in `work`'s order. */
async function inClients<T, R>(clients: number, work: T[], run: (item: T) => PromiseLike<R>): Promise<R[]> {
  const results: R[] = [];
  let next = 0;
  const client = async () => {
    while (next < work.length) {
      const i = next++;
      results[i] = await run(work[i]!);
    }
  };
  await Promise.all(Array.from({ length: clients }, client));
  return results;
}

describe.each(backends())('sweeps racing acks and each other (%s)', (_name, backend) => {
  jest.setTimeout(120_000);

  it('when two replicas sweep while acks arrive, then no ack of a live batch is lost, due ones go once', async () => {
    const svc = await startService(backend, { OPEN_BATCH_TTL: '1d', SWEEP_CHUNK: '5' });
    const replica = await startReplica(svc);
    try {
      // Open batches: the open-batch TTL is what makes them due.
      const make = (app: TestApp, count: number) => batchWith(app.client, count, { sealed: false });
      // 40 batches go stale; 10 of them get acks during the sweep (which makes them not due).
      const stale = [];
      for (let i = 0; i < 40; i++) stale.push(await make(svc, 4));
      svc.clock.now += 2 * DAY;
      const live = [];
      for (let i = 0; i < 10; i++) live.push(await make(replica, 300));

      const apis = [svc.api, replica.api];
      const sweeps = Array.from({ length: 6 }, (_, i) => apis[i % 2]!.post('/v1/admin/sweep'));
      // 64 clients at a time: 3,000 sockets opened at once overflow a loaded machine's listen
      // backlog (read ECONNRESET in CI), which is not what this test is about.
      const calls = live.flatMap((b, i) => b.ids.map((id, j) => ({ api: apis[(i + j) % 2]!, id })));
      const liveAcks = inClients(64, calls, ({ api, id }) => api.post('/v1/acks').send({ ids: [id] }));
      const staleAcks = stale.slice(0, 10).map((b, i) => apis[i % 2]!.post('/v1/acks').send({ ids: b.ids }));
      const [sweepResults, liveResults, staleResults] = await Promise.all([Promise.all(sweeps), liveAcks, Promise.all(staleAcks)]);

      for (const r of [...sweepResults, ...liveResults, ...staleResults]) expect(r.status).toBe(200);
      expect(liveResults.reduce((n, r) => n + r.body.acked, 0)).toBe(3000);
      for (const b of live) expect((await svc.api.get(`/v1/batches/${b.id}`)).body).toMatchObject({ succeeded: 300, pending: 0 });

      // A stale batch that an ack reached first is no longer due and keeps that ack; otherwise it is gone.
      let survivors = 0;
      for (const [i, b] of stale.slice(0, 10).entries()) {
        const res = await svc.api.get(`/v1/batches/${b.id}`);
        if (staleResults[i]!.body.acked === 4) {
          survivors += 1;
          expect(res.body.succeeded).toBe(4);
        } else {
          expect(staleResults[i]!.body.rejected.map((r: { reason: string }) => r.reason)).toEqual(Array(4).fill('unknown_batch'));
          expect(res.status).toBe(404);
        }
      }
      for (const b of stale.slice(10)) expect((await svc.api.get(`/v1/batches/${b.id}`)).status).toBe(404);
      const removed = sweepResults.reduce((n, r) => n + r.body.batchesRemoved, 0);
      expect(removed).toBe(40 - survivors);
      expect(sweepResults.reduce((n, r) => n + r.body.groupsRemoved, 0)).toBe(40 - survivors);
    } finally {
      await replica.stop();
      await svc.stop();
    }
  });
});
