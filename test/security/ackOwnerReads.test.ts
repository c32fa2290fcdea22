import { randomUUID } from 'node:crypto';

import { describeEachOrSkip, isPostgresBackend, serverBackends } from '../helpers/backends';
import { ProxiedService, startBehindProxy } from '../helpers/service';

const TOKENS = [
  { token: 'tenant-a-token-0123456789', tenant: 'a', scopes: ['consume'] },
  { token: 'tenant-b-token-0123456789', tenant: 'b', scopes: ['consume', 'produce'] },
];

/** `count` IDs of one group of a batch that does not exist. */
const madeUpIds = (count: number) => {
  const prefix = `${randomUUID()}:${randomUUID()}:`;
  return Array.from({ length: count }, (_, i) => `${prefix}${i}`);
};

/**
 * With several tenants, an ack call first reads whose batches it names (batchOwners.ts). While that
 * read hangs (a database that stopped answering), the calls waiting for it count against
 * ACK_QUEUE_MAX_IDS as queued calls do: one tenant's calls past its half are 503 at once, not held
 * in memory without bound.
 */
describeEachOrSkip(serverBackends())('acks while the read of whose batches they name hangs (%s)', (name, backend) => {
  let app: ProxiedService;
  beforeAll(async () => {
    app = await startBehindProxy(backend, { API_TOKENS: JSON.stringify(TOKENS), ACK_QUEUE_MAX_IDS: '10000', DB_POOL_SIZE: '3' });
  });
  afterAll(() => app.stop());

  const ack = (token: string, ids: string[]) =>
    app.api
      .post('/v1/acks')
      .set('Authorization', `Bearer ${token}`)
      .send({ ids })
      .then((res) => res); // supertest sends on then()

  const ownerReadOf = (backendName: string) => (isPostgresBackend(backendName) ? '"tenant" from "batches"' : '`tenant` from `batches`');

  it("then a tenant's calls past half the limit are 503 at once, the other tenant's wait, and all that waited are answered once it answers", async () => {
    const hung = app.proxy.freezeEveryConnectionSending(ownerReadOf(name));
    const first = madeUpIds(3_000);
    const waiting = ack(TOKENS[0]!.token, first);
    await hung;
    const started = performance.now();
    const past = await ack(TOKENS[0]!.token, madeUpIds(3_000));
    const pastMs = performance.now() - started;
    const ofB = ack(TOKENS[1]!.token, madeUpIds(3_000));
    await new Promise((resolve) => setTimeout(resolve, 200)); // b's call reaches the service and waits
    app.proxy.speak();

    expect([past.status, past.body.error?.code, pastMs < 1_000]).toEqual([503, 'unavailable', true]);
    const [answered, answeredB] = await Promise.all([waiting, ofB]);
    expect([answered.status, answeredB.status]).toEqual([200, 200]);
    expect(answered.body.rejected).toEqual(first.map((id) => ({ id, reason: 'unknown_batch' })));
    expect(answeredB.body).toMatchObject({ acked: 0 });
  }, 30_000);

  it("then a tenant's many calls naming batches none knows take one pooled connection, and the other tenant's opens go on", async () => {
    const hung = app.proxy.freezeEveryConnectionSending(ownerReadOf(name));
    const calls = [ack(TOKENS[0]!.token, madeUpIds(1))];
    await hung;
    calls.push(...Array.from({ length: 10 }, () => ack(TOKENS[0]!.token, madeUpIds(1))));
    await new Promise((resolve) => setTimeout(resolve, 200)); // they reach the service and wait for a read

    const opened = await app.api.post('/v1/batches').set('Authorization', `Bearer ${TOKENS[1]!.token}`).send({});
    app.proxy.speak();

    expect(opened.status).toBe(201);
    expect((await Promise.all(calls)).map((res) => res.status)).toEqual(Array(11).fill(200));
  }, 30_000);
});
