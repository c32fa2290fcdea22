import { randomUUID } from 'node:crypto';

import { describeEachOrSkip, isPostgresBackend, serverBackends } from '../helpers/backends';
import { ProxiedService, startBehindProxy } from '../helpers/service';

const TOKENS = [
  { token: 'tenant-a-token-0123456789', tenant: 'a', scopes: ['consume'] },
  { token: 'tenant-b-token-0123456789', tenant: 'b', scopes: ['consume'] },
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
    app = await startBehindProxy(backend, { API_TOKENS: JSON.stringify(TOKENS), ACK_QUEUE_MAX_IDS: '10000' });
  });
  afterAll(() => app.stop());

  const ack = (token: string, ids: string[]) =>
    app.api
      .post('/v1/acks')
      .set('Authorization', `Bearer ${token}`)
      .send({ ids })
      .then((res) => res); // supertest sends on then()

  it("then a tenant's calls past half the limit are 503 at once, the other tenant's wait, and all that waited are answered once it answers", async () => {
    const ownerRead = isPostgresBackend(name) ? '"tenant" from "batches"' : '`tenant` from `batches`';
    const hung = app.proxy.freezeEveryConnectionSending(ownerRead);
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
});
