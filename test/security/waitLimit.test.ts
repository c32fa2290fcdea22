import { backends, describeEachOrSkip } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { until } from '../helpers/realTime';
import { startService, TestService } from '../helpers/service';

const TOKENS = [
  { token: 'tenant-a-token-0123456789', tenant: 'a', scopes: ['produce', 'read', 'consume'] },
  { token: 'tenant-b-token-0123456789', tenant: 'b', scopes: ['produce', 'read', 'consume'] },
  { token: 'tenant-c-token-0123456789', tenant: 'c', scopes: ['produce', 'read', 'consume'] },
];
const [tokenA, tokenB, tokenC] = TOKENS.map((t) => t.token) as [string, string, string];

/**
 * Each long-poll holds a connection, timers and a place in every poll of the process for up to a
 * minute. WAIT_MAX bounds them per process, and with several tenants one tenant holds at most half:
 * a tenant that opens thousands is refused (429, with Retry-After), and the others still wait.
 */
describeEachOrSkip(backends())('long-polls past WAIT_MAX (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), WAIT_MAX: '4' });
  });
  afterAll(() => svc.stop());

  const waitFor = (token: string, batchId: string, timeout = 30) =>
    svc.api
      .get(`/v1/batches/${batchId}/wait?timeout=${timeout}`)
      .set('Authorization', `Bearer ${token}`)
      .then((res) => res); // supertest sends on then()

  const held = async () => Number(/^rollcall_waits_held (\d+)$/m.exec((await svc.api.get('/metrics')).text)?.[1]);

  it("then a tenant's waits past half of it are 429 at once, the other tenant's wait, and a's wait again once its own end", async () => {
    const ofA = await batchWith(svc.clientWith(tokenA), 2);
    const ofB = await batchWith(svc.clientWith(tokenB), 2);
    const aWaits = [waitFor(tokenA, ofA.id), waitFor(tokenA, ofA.id)];
    await until(async () => (await held()) === 2);

    const refused = await waitFor(tokenA, ofA.id);
    const noWait = await waitFor(tokenA, ofA.id, 0); // holds nothing: answered as a read
    const bWait = waitFor(tokenB, ofB.id);
    await until(async () => (await held()) === 3);
    await svc.clientWith(tokenA).ack(ofA.ids);
    await svc.clientWith(tokenB).ack(ofB.ids);

    expect([refused.status, refused.body.error?.code, refused.headers['retry-after']]).toEqual([429, 'too_many_waits', '1']);
    expect([noWait.status, noWait.body.state]).toEqual([200, 'sealed']);
    expect((await Promise.all(aWaits)).map((res) => [res.status, res.body.state])).toEqual([
      [200, 'complete'],
      [200, 'complete'],
    ]);
    expect([(await bWait).status, (await bWait).body.state]).toEqual([200, 'complete']);
    await until(async () => (await held()) === 0);
    expect((await waitFor(tokenA, ofA.id)).status).toBe(200);
  });

  it('then waits past WAIT_MAX in all are 429, also for a tenant that holds none', async () => {
    const ofA = await batchWith(svc.clientWith(tokenA), 1);
    const ofB = await batchWith(svc.clientWith(tokenB), 1);
    const ofC = await batchWith(svc.clientWith(tokenC), 1);
    const waits = [waitFor(tokenA, ofA.id, 2), waitFor(tokenA, ofA.id, 2), waitFor(tokenB, ofB.id, 2), waitFor(tokenB, ofB.id, 2)];
    await until(async () => (await held()) === 4);

    const refusedC = await waitFor(tokenC, ofC.id);

    expect([refusedC.status, refusedC.body.error?.code]).toEqual([429, 'too_many_waits']);
    expect((await Promise.all(waits)).map((res) => res.status)).toEqual([200, 200, 200, 200]);
  });
});
