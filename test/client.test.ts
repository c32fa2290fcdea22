import { execFile } from 'node:child_process';
import path from 'node:path';

import { HttpSend, httpSend, RollcallApiError, RollcallClient, RollcallPartialAckError } from '../src/client';
import { backends } from './helpers/backends';
import { startService, TestService } from './helpers/service';

describe.each(backends())('the TypeScript client and the CLI against a real server (%s)', (_name, backend) => {
  let svc: TestService;
  let ackCalls = 0;
  let client: RollcallClient;
  beforeAll(async () => {
    svc = await startService(backend);
    const send = httpSend(); // the client's default, counted
    const counting: HttpSend = (url, request) => {
      if (url.endsWith('/v1/acks')) ackCalls += 1;
      return send(url, request);
    };
    client = new RollcallClient({ baseUrl: svc.url, fetch: counting });
  });
  afterAll(async () => {
    await svc.stop();
  });

  it('when an add is given an empty idempotency key, then it is refused and adds nothing (not sent without a key, which a retry would add twice)', async () => {
    const batch = await client.open();
    const refused = await client.addItems(batch.id, 5, { idempotencyKey: '' }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RollcallApiError);
    expect(refused).toMatchObject({ status: 400 });
    expect((await client.status(batch.id)).total).toBe(0);
  });

  it('when a producer and a consumer use the client, then acks go in chunks and completion is seen once', async () => {
    const batch = await client.open({ userKey: 'client' });
    const added = await client.addItems(batch.id, 20_005, { idempotencyKey: 'once' });
    expect((await client.addItems(batch.id, 20_005, { idempotencyKey: 'once' })).groups).toEqual(added.groups);
    expect((await client.seal(batch.id, { expectedItems: 20_005 })).state).toBe('sealed');
    const ids = added.itemIds();
    expect(Array.isArray(ids)).toBe(false); // an iterator: IDs are made as they are sent
    const before = ackCalls;
    const result = await client.ack(ids);
    expect(ackCalls - before).toBe(3);
    expect(result).toMatchObject({ acked: 20_005, duplicates: 0, rejected: [] });
    expect(result.completed.map((b) => b.id)).toEqual([batch.id]);
    expect((await client.waitForCompletion(batch.id, { timeoutMs: 5000 })).state).toBe('complete');
    expect((await client.status(batch.id)).succeeded).toBe(20_005);
    expect((await client.list({ userKey: 'client' })).batches.map((b) => b.id)).toEqual([batch.id]);
  });

  it('when an ID holds a lone surrogate (no URL form), then the call is answered 404, not thrown before it is sent', async () => {
    const bad = 'a\ud800b';
    await expect(svc.client.item(bad)).rejects.toMatchObject({ name: 'RollcallApiError', status: 404, code: 'item_not_found' });
    await expect(svc.client.status(bad)).rejects.toMatchObject({ name: 'RollcallApiError', status: 404, code: 'batch_not_found' });
  });

  it('when an ID is `.` or `..` (steps of a path to a URL parser), then the call is answered 404 for that ID, not sent to another route', async () => {
    for (const dots of ['.', '..']) {
      await expect(client.status(dots)).rejects.toMatchObject({ status: 404, code: 'batch_not_found' });
      await expect(client.item(dots)).rejects.toMatchObject({ status: 404, code: 'item_not_found' });
      await expect(client.waitForCompletion(dots, { timeoutMs: 1000 })).rejects.toMatchObject({ status: 404, code: 'batch_not_found' });
      await expect(client.cancel(dots)).rejects.toMatchObject({ status: 404, code: 'batch_not_found' });
    }
  });

  it("when a list's userKey holds a lone surrogate (no URL form), then it is refused 400, not read as another key's U+FFFD", async () => {
    const other = await client.open({ userKey: 'lone-\ufffd' });
    await expect(client.list({ userKey: 'lone-\ud800' })).rejects.toMatchObject({ status: 400, code: 'invalid_request' });
    await expect(client.list({ userKey: 'lone-\udc00' })).rejects.toMatchObject({ status: 400, code: 'invalid_request' });
    expect((await client.list({ userKey: 'lone-\ufffd' })).batches.map((b) => b.id)).toEqual([other.id]);
    const odd = await client.open({ userKey: 'a b+c&d=e%\u{1F600}' });
    expect((await client.list({ userKey: 'a b+c&d=e%\u{1F600}' })).batches.map((b) => b.id)).toEqual([odd.id]);
  });

  it('when the service answers with an error, then the client throws it with the status and code', async () => {
    const missing = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';
    await expect(client.status(missing)).rejects.toMatchObject({ name: 'RollcallApiError', status: 404, code: 'batch_not_found' });
    const batch = await client.open();
    await client.seal(batch.id);
    const error = await client.addItems(batch.id, 1).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RollcallApiError);
    expect(error).toMatchObject({ status: 409, code: 'batch_not_open' });
  });

  it('when a worker checks an item and acks failures with an error, then every chunk carries the error', async () => {
    const batch = await client.open();
    const added = await client.addItems(batch.id, 10_001);
    await client.seal(batch.id);
    const [first] = added.itemIds();
    expect(await client.item(first!)).toEqual({ id: first, batchId: batch.id, state: 'pending', batchState: 'sealed' });
    const bodies: unknown[] = [];
    const spying = new RollcallClient({
      baseUrl: svc.url,
      // the global fetch, which the option also takes
      fetch: (input, init) => {
        if (String(input).endsWith('/v1/acks')) bodies.push(JSON.parse(String(init?.body)));
        return fetch(input, init);
      },
    });
    const result = await spying.ack(added.itemIds(), { outcome: 'failed', error: 'disk full' });
    expect(result.acked).toBe(10_001);
    expect(bodies).toHaveLength(2);
    for (const body of bodies) expect(body).toMatchObject({ outcome: 'failed', error: 'disk full' });
    expect(await client.item(first!)).toMatchObject({ state: 'failed', batchState: 'complete' });
    await expect(client.item(`${batch.id}:nope:0`)).rejects.toMatchObject({ status: 404, code: 'item_not_found' });
  });

  it("when a producer nests, cancels and reads failures with the client, then the answers are the API's", async () => {
    const parent = await client.open({ userKey: 'nest' });
    const [item] = (await client.addItems(parent.id, 2)).itemIds();
    const child = await client.open({ parentItem: item });
    expect(child.parentItem).toBe(item);
    expect((await client.list({ parent: parent.id })).batches.map((b) => b.id)).toEqual([child.id]);
    const added = await client.addItems(child.id, 3);
    await client.ack([...added.itemIds()].slice(0, 2), { outcome: 'failed', error: 'bad input' });
    const page = await client.failures(child.id, { limit: 1 });
    expect(page).toMatchObject({ failures: [{ error: 'bad input' }], dropped: 0 });
    expect((await client.failures(child.id, { cursor: page.nextCursor! })).failures).toHaveLength(1);
    const cancelled = await client.cancel(child.id);
    expect(cancelled).toMatchObject({ state: 'cancelled', outcome: 'cancelled' });
    expect((await client.waitForCompletion(child.id, { timeoutMs: 5000 })).state).toBe('cancelled');
    const late = await client.ack(added.itemIds());
    expect(late.rejected.map((r) => r.reason)).toEqual(['batch_cancelled', 'batch_cancelled', 'batch_cancelled']);
    await expect(client.cancel(child.id)).resolves.toMatchObject({ cancelledAt: cancelled.cancelledAt });
  });

  it.each([
    ['a dropped connection', () => Promise.reject(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' })), 'ECONNRESET'],
    ['an answer that is no ack result (a proxy answering {})', async () => ({ ok: true, status: 200, text: async () => '{}' }), 'invalid_response'],
  ])(
    "when an ack of two calls fails at the second with %s, then RollcallPartialAckError holds the first call's results, its completion included",
    async (_what, secondAnswer, code) => {
      const big = await client.open();
      const bigIds = [...(await client.addItems(big.id, 10_000)).itemIds()];
      await client.seal(big.id);
      const small = await client.open();
      const smallIds = [...(await client.addItems(small.id, 5)).itemIds()];
      await client.seal(small.id);
      const send = httpSend();
      let calls = 0;
      const failingSecond = new RollcallClient({
        baseUrl: svc.url,
        fetch: async (url, request) => {
          if (url.endsWith('/v1/acks') && ++calls === 2) return secondAnswer();
          return send(url, request);
        },
      });
      const failed: unknown = await failingSecond.ack([...bigIds, ...smallIds]).catch((error: unknown) => error);
      expect(failed).toBeInstanceOf(RollcallPartialAckError);
      const partial = failed as RollcallPartialAckError;
      expect(partial).toMatchObject({ code: 'partial_ack', cause: { code } });
      expect(partial.answered.acked).toBe(10_000);
      expect(partial.answered.completed.map((b) => b.id)).toEqual([big.id]);
      const rest = await client.ack([...bigIds, ...smallIds]);
      expect(rest).toMatchObject({ acked: 5, duplicates: 10_000 });
      expect(rest.completed.map((b) => b.id)).toEqual([small.id]);
      // The first call failing throws its own error, as before.
      calls = 1;
      await expect(failingSecond.ack(smallIds)).rejects.toMatchObject({ code });
    },
  );

  it('when the iterable of IDs throws after a call was answered, then RollcallPartialAckError holds that call, its completion included', async () => {
    const big = await client.open();
    const bigIds = [...(await client.addItems(big.id, 10_000)).itemIds()];
    await client.seal(big.id);
    function* idsThenFailure() {
      yield* bigIds;
      throw new Error('the ID source broke');
    }
    const failed: unknown = await client.ack(idsThenFailure()).catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(RollcallPartialAckError);
    expect((failed as RollcallPartialAckError).answered.completed.map((b) => b.id)).toEqual([big.id]);
    expect(failed).toMatchObject({ cause: { message: 'the ID source broke' } });
  });

  it.each([
    ['25 days (past what a timer takes)', 25 * 86_400_000],
    ['Infinity', Infinity],
    ['a fraction', 2_000.5],
  ])('when waitForCompletion is given %s, then it waits for the completion (no RangeError, no early abort)', async (_what, timeoutMs) => {
    const batch = await client.open();
    const ids = [...(await client.addItems(batch.id, 1)).itemIds()];
    await client.seal(batch.id);
    const fractional = new RollcallClient({ baseUrl: svc.url, timeoutMs: 30_000.25 });
    const waiting = fractional.waitForCompletion(batch.id, { timeoutMs });
    await new Promise((resolve) => setTimeout(resolve, 50));
    await client.ack(ids);
    expect((await waiting).state).toBe('complete');
  });

  it.each([
    ['25 days (past what a timer takes)', 25 * 86_400_000],
    ['Infinity', Infinity],
  ])("when the client's own timeoutMs is %s, then its calls are answered (no RangeError, no abort after 1 ms)", async (_what, timeoutMs) => {
    const patient = new RollcallClient({ baseUrl: svc.url, timeoutMs });
    const batch = await patient.open();
    expect(await patient.status(batch.id)).toMatchObject({ id: batch.id, state: 'open' });
  });

  it('when the wall clock steps an hour back while waitForCompletion waits, then it still ends at its timeoutMs', async () => {
    const batch = await client.open();
    await client.addItems(batch.id, 1);
    await client.seal(batch.id);
    const realNow = Date.now;
    const stepped = jest.spyOn(Date, 'now');
    try {
      const waiting = client.waitForCompletion(batch.id, { timeoutMs: 1000 });
      stepped.mockImplementation(() => realNow() - 3_600_000); // NTP steps the clock back
      expect((await waiting).state).toBe('sealed'); // not an hour later
    } finally {
      stepped.mockRestore();
    }
  }, 10_000);

  it('when a wait times out, then the batch comes back in its current state', async () => {
    const batch = await client.open();
    await client.addItems(batch.id, 1);
    await client.seal(batch.id);
    expect((await client.waitForCompletion(batch.id, { timeoutMs: 300 })).state).toBe('sealed');
  });

  it('when the CLI is used, then it opens, adds, seals, acks from stdin and reports status as JSON', async () => {
    const run = (args: string[], input?: string) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        const child = execFile(
          process.execPath,
          ['--import', 'tsx', 'src/cli/index.ts', ...args],
          { cwd: path.resolve(__dirname, '..'), env: { ...process.env, ROLLCALL_URL: svc.url } },
          (error, stdout, stderr) => resolve({ code: error ? Number(error.code) : 0, stdout, stderr }),
        );
        child.stdin?.end(input ?? '');
      });
    const opened = await run(['open', '--user-key', 'cli']);
    expect(opened.code).toBe(0);
    const id = JSON.parse(opened.stdout).id as string;
    const added = JSON.parse((await run(['add', id, '3'])).stdout);
    expect((await run(['seal', id])).code).toBe(0);
    const ids = [0, 1, 2].map((i) => `${id}:${added.groups[0].id}:${i}`).join('\n');
    const failedOne = JSON.parse((await run(['ack', '--failed', '--error', 'cli says no'], ids.split('\n')[0])).stdout);
    expect(failedOne).toMatchObject({ acked: 1 });
    expect(JSON.parse((await run(['failures', id])).stdout).failures[0]).toMatchObject({ error: 'cli says no' });
    expect(JSON.parse((await run(['item', ids.split('\n')[0]!])).stdout)).toMatchObject({ state: 'failed' });
    const acked = JSON.parse((await run(['ack'], ids)).stdout);
    expect(acked).toMatchObject({ acked: 3, completed: [{ id, state: 'complete' }] });
    expect(JSON.parse((await run(['status', id])).stdout)).toMatchObject({ state: 'complete', succeeded: 3 });
    const missing = await run(['status', '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b']);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stderr)).toMatchObject({ status: 404, code: 'batch_not_found' });
    const usage = await run(['frobnicate']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/usage: rollcall/);
  });
});
