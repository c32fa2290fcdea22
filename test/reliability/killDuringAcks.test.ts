import { describeEachOrSkip, processEnv, serverBackends, TestDatabase } from '../helpers/backends';
import { call, runClients, ServiceProcess, spawnService } from '../helpers/processes';
import { chunks, itemIds, shuffled } from '../helpers/service';

const servers = serverBackends();
const describeOnServers = describeEachOrSkip(servers);

describeOnServers('a service killed -9 during an ack storm (%s)', (_name, backend) => {
  jest.setTimeout(180_000);
  let database: TestDatabase;
  let service: ServiceProcess;
  beforeAll(async () => {
    database = await backend.create();
  });
  afterAll(async () => {
    await service?.stop();
    await database.drop();
  });

  it('when the process dies mid-storm, then every 200 ack is durable and a resend gives exact counts', async () => {
    const env = processEnv(database);
    service = await spawnService(env);
    const id = (await call(`${service.url}/v1/batches`, 'POST', {})).body.id;
    const added = await call(`${service.url}/v1/batches/${id}/items`, 'POST', { count: 100_000 });
    await call(`${service.url}/v1/batches/${id}/seal`, 'POST', {});
    const ids = itemIds(id, added.body.groups);
    const work = chunks(shuffled(ids, 9), 200);

    const answeredOk: string[][] = [];
    let completions = 0;
    let sent = 0;
    let failedRequests = 0;
    const url = service.url;
    // The kill lands once 150 calls have been answered, whatever the speed of the machine.
    let killed: Promise<void> | null = null;
    await runClients(work, 32, async (chunk) => {
      sent += 1;
      try {
        const res = await call(`${url}/v1/acks`, 'POST', { ids: chunk });
        if (res.status === 200) {
          answeredOk.push(chunk);
          completions += res.body.completed.length;
          if (answeredOk.length === 150) killed = service.stop('SIGKILL');
        }
      } catch {
        failedRequests += 1; // the connection died with the process: no answer, no promise made
      }
    });
    await killed;
    expect(failedRequests).toBeGreaterThan(0); // the kill really landed mid-storm
    expect(answeredOk.length).toBeGreaterThan(0);

    service = await spawnService(env);
    const confirmed = answeredOk.flat();
    // Every ID that was answered 200 before the kill is already recorded: resending it changes
    // nothing. All of them, the last answered (the nearest the kill) too.
    for (const resent of chunks(confirmed, 10_000)) {
      const recheck = await call(`${service.url}/v1/acks`, 'POST', { ids: resent });
      expect([recheck.body.acked, recheck.body.duplicates]).toEqual([0, resent.length]);
    }
    const before = (await call(`${service.url}/v1/batches/${id}`, 'GET')).body;
    expect(before.succeeded).toBeGreaterThanOrEqual(confirmed.length);

    for (const chunk of chunks(ids, 10_000)) {
      const res = await call(`${service.url}/v1/acks`, 'POST', { ids: chunk });
      completions += res.body.completed.length;
    }
    const after = (await call(`${service.url}/v1/batches/${id}`, 'GET')).body;
    expect(after).toMatchObject({ state: 'complete', succeeded: 100_000, failed: 0, pending: 0 });
    expect(completions).toBe(1);
    console.log(
      `kill -9 storm: ${sent} ack requests started, ${answeredOk.length} answered 200 (${confirmed.length} IDs) before the kill, ${failedRequests} cut off; lost acks: 0`,
    );
  });
});
