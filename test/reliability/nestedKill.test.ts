import { Db, openDb } from '../../src/store/db';
import { backends, processEnv, TestDatabase } from '../helpers/backends';
import { call, runClients, ServiceProcess, spawnService } from '../helpers/processes';
import { Receiver } from '../helpers/receiver';

describe.each(backends())('a service killed -9 between children completing and their parent items being acked (%s)', (_name, backend) => {
  jest.setTimeout(180_000);
  let database: TestDatabase;
  let service: ServiceProcess | undefined;
  let db: Db;
  let receiver: Receiver;
  beforeAll(async () => {
    database = await backend.create();
    receiver = new Receiver();
    await receiver.start();
  });
  afterAll(async () => {
    await service?.stop();
    await db?.destroy();
    await receiver.stop();
    await database.drop();
  });

  /** One round: a parent of CHILDREN one-item children, an ack storm on the children, kill -9 mid-storm, restart, finish. */
  async function round(env: Record<string, string>, clients: number) {
    const CHILDREN = 120;
    service = await spawnService(env);
    const parent = (await call(`${service.url}/v1/batches`, 'POST', { callbackUrl: receiver.url })).body.id as string;
    const group = (await call(`${service.url}/v1/batches/${parent}/items`, 'POST', { count: CHILDREN })).body.groups[0].id as string;
    await call(`${service.url}/v1/batches/${parent}/seal`, 'POST', {});
    const children: Array<{ id: string; item: string }> = [];
    for (let i = 0; i < CHILDREN; i++) {
      const id = (await call(`${service.url}/v1/batches`, 'POST', { parentItem: `${parent}:${group}:${i}` })).body.id as string;
      const g = (await call(`${service.url}/v1/batches/${id}/items`, 'POST', { count: 1 })).body.groups[0].id as string;
      await call(`${service.url}/v1/batches/${id}/seal`, 'POST', {});
      children.push({ id, item: `${id}:${g}:0` });
    }

    let answered = 0;
    let killed: Promise<void> | null = null;
    const url = service.url;
    await runClients(children, clients, async (child) => {
      try {
        const res = await call(`${url}/v1/acks`, 'POST', { ids: [child.item] });
        if (res.status === 200 && ++answered === CHILDREN / 3) killed = service!.stop('SIGKILL');
      } catch {
        // cut off by the kill: no answer
      }
    });
    await killed;

    const mine = db('batches').where('parent_batch_id', parent);
    const completeChildren = Number(((await mine.clone().where('state', 'complete').count({ n: '*' })) as Array<{ n: number }>)[0]!.n);
    const parentAcked = Number((await db('batches').where('id', parent).first()).succeeded);
    const waiting = Number(((await db('child_outcomes').count({ n: '*' })) as Array<{ n: number }>)[0]!.n);
    // Every complete child whose parent item is not acked yet still has its outcome row (rows of
    // acks that committed just before the kill may remain too: they will be repeated as duplicates).
    expect(waiting).toBeGreaterThanOrEqual(completeChildren - parentAcked);

    service = await spawnService(env);
    for (const child of children) expect((await call(`${service.url}/v1/acks`, 'POST', { ids: [child.item] })).status).toBe(200);
    expect((await call(`${service.url}/v1/batches/${parent}/wait?timeout=30`, 'GET')).body.state).toBe('complete');
    // Rows the dead process had claimed come back when their lease ends, and are acked again as duplicates.
    const drained = Date.now() + 30_000;
    while (Number(((await db('child_outcomes').count({ n: '*' })) as Array<{ n: number }>)[0]!.n) > 0 && Date.now() < drained)
      await new Promise((r) => setTimeout(r, 100));
    const done = (await call(`${service.url}/v1/batches/${parent}`, 'GET')).body;
    expect(done).toMatchObject({ state: 'complete', outcome: 'succeeded', total: CHILDREN, succeeded: CHILDREN, failed: 0, pending: 0 });
    const deadline = Date.now() + 30_000;
    while (!receiver.deliveries.some((d) => JSON.parse(d.body).batch.id === parent) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 500));
    expect(receiver.deliveries.filter((d) => JSON.parse(d.body).batch.id === parent).map((d) => JSON.parse(d.body).event)).toEqual(['batch.completed']);
    const count = async (query: Promise<Array<{ n: number | string }>>) => Number((await query)[0]!.n); // PostgreSQL counts as strings
    expect(await count(db('outbox').where({ batch_id: parent }).count({ n: '*' }))).toBe(1);
    expect(await count(db('child_outcomes').count({ n: '*' }))).toBe(0);
    await service.stop();
    return { answered, completeChildren, parentAcked, waiting, gap: completeChildren - parentAcked };
  }

  it('when the process dies as children complete, then after a restart each parent item is acked once', async () => {
    const env = { ...processEnv(database), CALLBACK_POLL_INTERVAL: '200ms' };
    db = openDb(database.config);
    // The kill must land after some child committed its completion and before its parent item was
    // acked; how often it does depends on the machine, so rounds repeat (each one fully checked) until
    // one did. On SQLite the window is narrow (one connection: the parent ack follows at once), and a
    // fast machine once went 6 rounds without landing in it; more clients queue more acks ahead of it.
    const rounds: Array<Awaited<ReturnType<typeof round>>> = [];
    for (let i = 0; i < 12 && !rounds.some((r) => r.gap > 0); i++) rounds.push(await round(env, [16, 32, 64, 4][i % 4]!));
    console.log(`nested kill -9 (${_name}): ${JSON.stringify(rounds)}`);
    expect(rounds.some((r) => r.gap > 0)).toBe(true);
  });
});
