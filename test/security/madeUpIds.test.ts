import { randomUUID } from 'node:crypto';

import { describeEachOrSkip, serverBackends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { ProxiedService, startBehindProxy } from '../helpers/service';
import { TcpProxy } from '../helpers/tcpProxy';

const TOKENS = [
  { token: 'tenant-a-token-0123456789', tenant: 'a', scopes: ['produce', 'read', 'consume'] },
  { token: 'tenant-b-token-0123456789', tenant: 'b', scopes: ['produce', 'read', 'consume'] },
];
const [tokenA, tokenB] = TOKENS.map((t) => t.token) as [string, string];

/** A batch or group ID above any the service makes (its IDs are UUIDv7, ordered by time). */
const aboveAll = () => `ffffffff-ffff-7fff-bfff-${randomUUID().slice(-12)}`;

/**
 * Tenant A's request names IDs no row has. Its transaction is held open at its locking read (the
 * database's answer held, as a slow network or a busy replica holds it), which is how a stream of
 * such requests, each brief, keeps a lock for good when they overlap. Tenant B opens a batch and
 * adds items meanwhile: nothing of A's is in B's way.
 */
describeEachOrSkip(serverBackends())("one tenant's requests naming batches and groups that do not exist (%s)", (_name, backend) => {
  let app: ProxiedService;
  let proxy: TcpProxy;
  beforeAll(async () => {
    app = await startBehindProxy(backend, { API_TOKENS: JSON.stringify(TOKENS), LOCK_TIMEOUT: '1s' });
    proxy = app.proxy;
  });
  afterAll(() => app.stop());

  const asA = (path: string, body: object) => app.api.post(path).set('Authorization', `Bearer ${tokenA}`).send(body);

  /** Holds A's request open at the statement that names `madeUp`, runs B's, then lets A's finish. */
  async function whileHeld(madeUp: string, request: () => PromiseLike<{ status: number }>): Promise<{ a: number; b: number[] }> {
    const held = proxy.freezeConnectionSending(madeUp);
    const a = request().then((res) => res.status); // supertest sends on then()
    await held;
    const b: number[] = [];
    const opened = await app.api.post('/v1/batches').set('Authorization', `Bearer ${tokenB}`).send({});
    b.push(opened.status);
    if (opened.status === 201)
      b.push((await app.api.post(`/v1/batches/${opened.body.id}/items`).set('Authorization', `Bearer ${tokenB}`).send({ count: 10 })).status);
    proxy.speak();
    return { a: await a, b };
  }

  it("when A's ack names a batch above every batch, then B's batch opens and takes items meanwhile", async () => {
    const madeUp = aboveAll();
    expect(await whileHeld(madeUp, () => asA('/v1/acks', { ids: [`${madeUp}:${randomUUID()}:0`] }))).toEqual({ a: 200, b: [201, 201] });
  });

  it("when A's ack names a group above every group of A's batch, the newest, then B's batch opens and takes items meanwhile", async () => {
    const own = await batchWith(app.clientWith(tokenA), 10);
    const madeUp = aboveAll();
    expect(await whileHeld(madeUp, () => asA('/v1/acks', { ids: [`${own.id}:${madeUp}:0`] }))).toEqual({ a: 200, b: [201, 201] });
  });

  it("when A seals a batch above every batch, then B's batch opens and takes items meanwhile", async () => {
    const madeUp = aboveAll();
    expect(await whileHeld(madeUp, () => asA(`/v1/batches/${madeUp}/seal`, {}))).toEqual({ a: 404, b: [201, 201] });
  });
});
