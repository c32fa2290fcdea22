import { randomBytes } from 'node:crypto';

import { Queue, Worker } from 'bullmq';

import { HttpSend, httpSend, RollcallClient } from '../../src/client';
import { rollcallProcessor } from '../../src/integrations/bullmq';
import { openBatch } from '../../src/integrations/producer';
import { backends, describeEachOrSkip } from '../helpers/backends';
import { describeWith, redisConnection, redisUrl } from '../helpers/brokers';
import { until } from '../helpers/realTime';
import { startService, TestService } from '../helpers/service';
import { TestJobData } from './fixtures/jobs';

const TOKENS = [{ token: 'tenant-a-token-0123456789', tenant: 'a', scopes: ['produce', 'consume', 'read'] }];

/** The client's own sending, counting the 429s it got, by what was asked. */
function counting429s(): { send: HttpSend; refused: Map<string, number> } {
  const send = httpSend();
  const refused = new Map<string, number>();
  return {
    refused,
    send: async (url, request) => {
      const response = await send(url, request);
      const asked = `${request.method} ${new URL(url).pathname.replace(/[0-9a-f-]{36}/g, ':id')}`;
      if (response.status === 429) refused.set(asked, (refused.get(asked) ?? 0) + 1);
      return response;
    },
  };
}

/**
 * An operator sets TENANT_RATE_LIMIT, and a tenant's producer and workers meet it: its calls are
 * answered 429 with Retry-After. They must wait and send again, never lose an ack, fail a job or
 * add an item twice.
 */
describeWith(redisUrl).each(backends())('rollcall/producer and rollcall/bullmq under a tenant rate limit (%s)', (_name, backend) => {
  const connection = redisConnection(redisUrl ?? 'redis://127.0.0.1:6379');
  const prefix = `rollcall-test-${randomBytes(4).toString('hex')}`;
  let svc: TestService;
  let queue: Queue<TestJobData>;
  let worker: Worker<TestJobData> | undefined;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), TENANT_RATE_LIMIT: '8', TENANT_RATE_WINDOW: '1s' });
    queue = new Queue<TestJobData>(`q-${randomBytes(4).toString('hex')}`, { connection, prefix });
  });
  afterAll(async () => {
    await worker?.close();
    await queue.obliterate({ force: true });
    await queue.close();
    await svc.stop();
  });

  it('then every job completes once, nothing fails, and the batch counts each item once', async () => {
    const { send, refused } = counting429s();
    const client = new RollcallClient({ baseUrl: svc.url, token: TOKENS[0]!.token, fetch: send });
    let n = 0;
    // Three batches of open, add and seal, and the workers' acks: past 8 calls a second.
    const batches = [];
    for (let i = 0; i < 3; i++) {
      batches.push(
        await openBatch(client, {
          count: 100,
          enqueue: async (ids) => {
            await queue.addBulk(ids.map((id) => ({ name: 'item', data: { rollcallItemId: id, n: n++ }, opts: { attempts: 1, removeOnComplete: false } })));
          },
        }),
      );
    }
    let runs = 0;
    worker = new Worker<TestJobData>(
      queue.name,
      rollcallProcessor<TestJobData, string>(
        client,
        async () => {
          runs++;
          await new Promise((resolve) => setTimeout(resolve, 5));
          return 'ok';
          // Calls of 5 acks, 4 at once: past 8 a second however slowly the machine runs the jobs (in calls
          // of up to 10,000, a loaded machine's few calls a second did not always meet the limit).
        },
        { maxIdsPerCall: 5 },
      ),
      { connection, prefix, concurrency: 20 },
    );

    const done = [];
    for (const batch of batches) done.push(await client.waitForCompletion(batch.id, { timeoutMs: 60_000 }));

    for (const batch of done) expect(batch).toMatchObject({ state: 'complete', total: 100, succeeded: 100, failed: 0, pending: 0 });
    // rollcall's commit comes first: the last jobs move to BullMQ's completed set just after their ack's answer.
    await until(async () => {
      const { completed = 0, failed = 0 } = await queue.getJobCounts('completed', 'failed');
      return completed + failed >= 300;
    });
    expect(await queue.getJobCounts('completed', 'failed')).toEqual({ completed: 300, failed: 0 });
    expect(runs).toBe(300);
    // The limit was met, and waited out.
    expect(refused.get('POST /v1/acks') ?? 0).toBeGreaterThan(0);
  }, 90_000);
});

/** An open has no idempotency key, so openBatch sends one again only when rollcall refused it with a 429, which made nothing. */
describeEachOrSkip(backends())('rollcall/producer when its open meets a tenant rate limit (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), TENANT_RATE_LIMIT: '1', TENANT_RATE_WINDOW: '2s' });
  });
  afterAll(() => svc.stop());

  it('then the open waits out the window and opens one batch, not two', async () => {
    const { send, refused } = counting429s();
    const client = new RollcallClient({ baseUrl: svc.url, token: TOKENS[0]!.token, fetch: send });
    await client.list(); // the window's one request: the open that follows at once is refused
    const enqueued: string[] = [];

    const batch = await openBatch(client, { count: 3, enqueue: async (ids) => void enqueued.push(...ids) });

    expect(refused.get('POST /v1/batches')).toBeGreaterThan(0);
    expect([batch.state, batch.total, enqueued.length]).toEqual(['sealed', 3, 3]);
    await new Promise((resolve) => setTimeout(resolve, 2_100)); // a window of its own for the list
    expect((await client.list()).batches.map((listed) => listed.id)).toEqual([batch.id]);
  }, 60_000);
});

/**
 * Answers that may hide an open that was made: a 503, or a 429 that is not rollcall's own (a proxy
 * that may have sent the open on to another replica first). openBatch must not send the open again.
 */
describeEachOrSkip(backends())('rollcall/producer when its open was made but answered otherwise (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS) });
  });
  afterAll(() => svc.stop());

  it.each([
    [503, { error: { code: 'unavailable', message: 'the answer was lost' } }],
    [429, { message: "a proxy's own limit" }],
  ])('then, answered %s, it throws and one batch was made, not two', async (status, body) => {
    const send = httpSend();
    const client = new RollcallClient({
      baseUrl: svc.url,
      token: TOKENS[0]!.token,
      fetch: async (url, request) => {
        const answer = await send(url, request); // made
        if (request.method !== 'POST' || !url.endsWith('/v1/batches')) return answer;
        return { ok: false, status, text: async () => JSON.stringify(body), headers: { get: (name: string) => (name === 'retry-after' ? '0' : null) } };
      },
    });
    const before = (await client.list()).batches.length;

    await expect(openBatch(client, { count: 1, enqueue: async () => undefined })).rejects.toMatchObject({ status });
    expect((await client.list()).batches).toHaveLength(before + 1);
  });
});
