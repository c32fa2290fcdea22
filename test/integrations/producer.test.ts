import { RollcallClient } from '../../src/client';
import { RollcallIntegrationError } from '../../src/integrations/errors';
import { openBatch } from '../../src/integrations/producer';
import { backends } from '../helpers/backends';
import { startService, TestService } from '../helpers/service';

describe.each(backends())('rollcall/producer openBatch (%s)', (_name, backend) => {
  let svc: TestService;
  let client: RollcallClient;
  beforeAll(async () => {
    svc = await startService(backend);
    client = new RollcallClient({ baseUrl: svc.url });
  });
  afterAll(async () => {
    await svc.stop();
  });

  /** Pending items of a new parent batch, for children to stand for. */
  const parentItems = async (count: number): Promise<string[]> => {
    const ids: string[] = [];
    await openBatch(client, { count, enqueue: (chunk) => void ids.push(...chunk) });
    return ids;
  };

  it('when a batch of 2,500 is opened, then enqueue gets each ID once in chunks of ≤ 1,000, then the seal', async () => {
    const chunks: string[][] = [];
    const batch = await openBatch(client, { count: 2500, userKey: 'producer', metadata: { job: 'x' }, enqueue: async (ids) => void chunks.push(ids) });
    expect(chunks.map((c) => c.length)).toEqual([1000, 1000, 500]);
    const ids = chunks.flat();
    expect(new Set(ids).size).toBe(2500);
    expect(batch).toMatchObject({ state: 'sealed', total: 2500, pending: 2500, userKey: 'producer', metadata: { job: 'x' } });
    const acked = await client.ack(ids);
    expect(acked).toMatchObject({ acked: 2500, rejected: [] });
    expect(acked.completed.map((b) => b.id)).toEqual([batch.id]);
  });

  it('when enqueue empties the array it is given (sending it on in tens), then every ID is still enqueued and the batch completes', async () => {
    const sent: string[] = [];
    // A synchronous callback, as a queue client that buffers may be.
    const batch = await openBatch(client, {
      count: 2500,
      enqueue: (ids) => {
        while (ids.length > 0) sent.push(...ids.splice(0, 10));
      },
    });
    expect([sent.length, new Set(sent).size]).toEqual([2500, 2500]);
    expect((await client.ack(sent)).completed.map((b) => b.id)).toEqual([batch.id]);
  });

  it('when the answer to an add is lost and the add is retried, then nothing is added twice', async () => {
    const keys: string[] = [];
    let lost = 0;
    const losing: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      if (String(input).endsWith('/items')) {
        keys.push(String((init?.headers as Record<string, string>)['idempotency-key']));
        if (lost++ === 0) throw new TypeError('fetch failed'); // committed, but the producer never hears it
      }
      return response;
    };
    const batch = await openBatch(new RollcallClient({ baseUrl: svc.url, fetch: losing }), { count: 1500, enqueue: async () => undefined });
    expect(keys).toHaveLength(2);
    expect(keys[0]).toBe(keys[1]);
    expect(batch).toMatchObject({ state: 'sealed', total: 1500 });
  });

  it('when a batch of 3,000,000 is opened, then its IDs are made as they are enqueued, never all at once', async () => {
    global.gc?.();
    const before = process.memoryUsage().heapUsed;
    let peak = 0;
    let count = 0;
    let largest = 0;
    const batch = await openBatch(client, {
      count: 3_000_000,
      enqueue: async (ids) => {
        count += ids.length;
        largest = Math.max(largest, ids.length);
        if (count % 100_000 === 0) peak = Math.max(peak, process.memoryUsage().heapUsed - before);
      },
    });
    expect(batch.total).toBe(3_000_000);
    expect(count).toBe(3_000_000);
    expect(largest).toBe(1000);
    // 3,000,000 IDs of 85 characters held at once would take well over 250 MB.
    expect(peak).toBeLessThan(100 * 2 ** 20);
  }, 120_000);

  it('when the service runs with the smallest GROUP_SIZE, then a batch above what one keyed add takes there is still opened whole', async () => {
    // GROUP_SIZE 8: an add with an Idempotency-Key takes at most 800,000 items (100,000 groups).
    const small = await startService(backend, { GROUP_SIZE: '8' });
    try {
      let enqueued = 0;
      const batch = await openBatch(new RollcallClient({ baseUrl: small.url }), { count: 800_001, enqueue: async (ids) => void (enqueued += ids.length) });
      expect([batch.state, batch.total, enqueued]).toEqual(['sealed', 800_001, 800_001]);
    } finally {
      await small.stop();
    }
  }, 120_000);

  it('when enqueue throws, then the error names the batch, which stays open and cannot complete', async () => {
    const error = await openBatch(client, {
      count: 10,
      enqueue: async () => {
        throw new Error('queue is down');
      },
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RollcallIntegrationError);
    expect(error).toMatchObject({ code: 'enqueue_failed', enqueued: 0, cause: { message: 'queue is down' } });
    const batchId = (error as RollcallIntegrationError).batchId!;
    expect((await client.status(batchId)).state).toBe('open');
  });

  it('when enqueue throws at its third chunk, then the error says how many IDs it took before', async () => {
    let calls = 0;
    const error = await openBatch(client, {
      count: 2500,
      enqueue: async () => {
        if (++calls === 3) throw new Error('queue is down');
      },
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'enqueue_failed', enqueued: 2000 });
  });

  it('when the add is refused once the batch is open, then the error names the batch', async () => {
    // Someone cancels the batch between its open and its add: the service refuses the add (409).
    const cancelling: typeof fetch = async (input, init) => {
      const match = /\/v1\/batches\/([^/]+)\/items$/.exec(String(input));
      if (match) await client.cancel(match[1]!);
      return fetch(input, init);
    };
    const error = await openBatch(new RollcallClient({ baseUrl: svc.url, fetch: cancelling }), { count: 10, enqueue: async () => undefined }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(RollcallIntegrationError);
    expect(error).toMatchObject({ code: 'add_failed', cause: { status: 409 } });
    expect((await client.status((error as RollcallIntegrationError).batchId!)).state).toBe('cancelled');
  });

  it('when the seal is refused after every item was enqueued, then the error names the batch', async () => {
    let batchId = '';
    const error = await openBatch(client, {
      count: 1500,
      enqueue: async (ids) => {
        batchId = ids[0]!.split(':')[0]!;
        if (ids.length < 1000) await client.cancel(batchId); // the last chunk: the seal then meets a cancelled batch
      },
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RollcallIntegrationError);
    expect(error).toMatchObject({ code: 'seal_failed', batchId, cause: { status: 409 } });
    // Not "is not sealed": a seal whose answers were all lost may have been committed.
    expect((error as Error).message).toBe(`the seal failed; batch ${batchId} may not be sealed (sealing it again changes nothing if it was)`);
  });

  it('when the input carries other settings of the caller, then only the fields of the batch are sent; parentItem opens a child', async () => {
    let parentItem = '';
    const parent = await openBatch(client, { count: 1, enqueue: ([id]) => void (parentItem = id!) });
    const settings = { count: 2, queueName: 'thumbnails', enqueue: async () => undefined, parentItem };
    const child = await openBatch(client, settings);
    expect(child).toMatchObject({ state: 'sealed', total: 2, parentItem });
    expect((await client.status(parent.id)).pending).toBe(1);
  });

  it('when a rerun opens the child its item already has (the earlier run sealed it, then died), then that child is returned and nothing is enqueued again', async () => {
    const parentIds: string[] = [];
    const parent = await openBatch(client, { count: 4, enqueue: (ids) => void parentIds.push(...ids) });
    const [sealedFor, openFor, otherFor, cancelledFor] = parentIds as [string, string, string, string];
    let enqueued = 0;
    const first = await openBatch(client, { count: 2, parentItem: sealedFor, enqueue: (ids) => void (enqueued += ids.length) });
    const again = await openBatch(client, { count: 2, parentItem: sealedFor.toUpperCase(), enqueue: (ids) => void (enqueued += ids.length) });
    expect([again.id, again.state, enqueued]).toEqual([first.id, 'sealed', 2]);

    // A child of another size is not taken over, nor one still open with more items than the rerun's.
    const refused = (parentItem: string, count: number) =>
      openBatch(client, { count, parentItem, enqueue: () => undefined }).catch((error: unknown) => error as { status?: number; code?: string });
    expect(await refused(sealedFor, 3)).toMatchObject({ status: 409, code: 'item_not_pending' });
    const bigger = await client.open({ parentItem: openFor });
    await client.addItems(bigger.id, 3);
    expect(await refused(openFor, 2)).toMatchObject({ status: 409, code: 'item_not_pending' });
    await client.ack([otherFor]);
    expect(await refused(otherFor, 2)).toMatchObject({ status: 409, code: 'item_not_pending' }); // acked: no child stands for it
    const cancelled = await openBatch(client, { count: 2, parentItem: cancelledFor, enqueue: () => undefined });
    await client.cancel(cancelled.id); // its item fails, "child batch cancelled": nothing to hand over
    expect(await refused(cancelledFor, 2)).toMatchObject({ status: 409, code: 'item_not_pending' });
    expect((await client.list({ parent: parent.id })).batches).toHaveLength(3);
  });

  it('when a rerun finds the child an earlier run left open (its seal failed), then it finishes that child: the same items again, sealed, and the parent item gets its outcome', async () => {
    const parentIds: string[] = [];
    const parent = await openBatch(client, { count: 1, enqueue: (ids) => void parentIds.push(...ids) });
    const parentItem = parentIds[0]!;
    const sealRefused: typeof fetch = (input, init) =>
      String(input).endsWith('/seal')
        ? Promise.resolve(new Response(JSON.stringify({ error: { code: 'invalid_request', message: 'refused by the test' } }), { status: 400 }))
        : fetch(input, init);
    const first: string[] = [];
    const error = await openBatch(new RollcallClient({ baseUrl: svc.url, fetch: sealRefused }), {
      count: 2500,
      parentItem,
      enqueue: (ids) => void first.push(...ids),
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'seal_failed', enqueued: 2500 });
    const again: string[] = [];
    const child = await openBatch(client, { count: 2500, parentItem, enqueue: (ids) => void again.push(...ids) });
    expect(child).toMatchObject({ id: (error as RollcallIntegrationError).batchId, state: 'sealed', total: 2500, parentItem });
    expect(again).toEqual(first); // the same groups, every ID handed out again
    // Both runs' jobs ack: each item counts once.
    expect(await client.ack(first)).toMatchObject({ acked: 2500, duplicates: 0 });
    expect(await client.ack(again)).toMatchObject({ acked: 0, duplicates: 2500 });
    expect((await client.status(child.id)).state).toBe('complete');
    await svc.rollcall.childOutcomes.deliverDue();
    expect(await client.status(parent.id)).toMatchObject({ state: 'complete', succeeded: 1 });
  });

  it('when a rerun finds the child an earlier run left open mid-way (its enqueue failed at the second chunk), then it enqueues every ID and seals it', async () => {
    const parentItem = (await parentItems(1))[0]!;
    let chunks = 0;
    const first: string[] = [];
    const error = await openBatch(client, {
      count: 2500,
      parentItem,
      enqueue: (ids) => {
        if (++chunks === 2) throw new Error('the queue went away');
        first.push(...ids);
      },
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'enqueue_failed', enqueued: 1000 });
    const again: string[] = [];
    const child = await openBatch(client, { count: 2500, parentItem, enqueue: (ids) => void again.push(...ids) });
    expect(child).toMatchObject({ id: (error as RollcallIntegrationError).batchId, state: 'sealed', total: 2500 });
    expect(again.slice(0, 1000)).toEqual(first);
    expect((await client.ack(again)).completed.map((b) => b.id)).toEqual([child.id]);
  });

  it('when an open child does not look like this call’s (another userKey, a total its adds do not reach, its item no longer pending), then it is not taken over and nothing is added', async () => {
    const [otherKeyFor, offTheWayFor, failedFor] = await parentItems(3);
    const refused = async (parentItem: string, input: { userKey?: string } = {}) => {
      let enqueued = 0;
      const error = await openBatch(client, { count: 5, parentItem, ...input, enqueue: (ids) => void (enqueued += ids.length) }).catch((e: unknown) => e);
      expect(enqueued).toBe(0);
      return error;
    };
    const otherKey = await client.open({ parentItem: otherKeyFor, userKey: 'first' });
    expect(await refused(otherKeyFor!, { userKey: 'second' })).toMatchObject({ status: 409, code: 'item_not_pending' });
    const offTheWay = await client.open({ parentItem: offTheWayFor });
    await client.addItems(offTheWay.id, 1);
    expect(await refused(offTheWayFor!)).toMatchObject({ status: 409, code: 'item_not_pending' });
    const failed = await client.open({ parentItem: failedFor });
    await client.ack([failedFor!], { outcome: 'failed', error: 'the last attempt gave up' });
    expect(await refused(failedFor!)).toMatchObject({ status: 409, code: 'item_not_pending' });
    for (const [child, total] of [
      [otherKey, 0],
      [offTheWay, 1],
      [failed, 0],
    ] as const)
      expect(await client.status(child.id)).toMatchObject({ state: 'open', total });
  });

  it('when a rerun finds an open child holding items that no run of the producer added, then it fails with add_failed and enqueues nothing', async () => {
    const parentItem = (await parentItems(1))[0]!;
    const other = await client.open({ parentItem });
    await client.addItems(other.id, 5); // no Idempotency-Key of the producer's
    let enqueued = 0;
    const error = await openBatch(client, { count: 5, parentItem, enqueue: (ids) => void (enqueued += ids.length) }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'add_failed', batchId: other.id });
    expect(enqueued).toBe(0);
    expect((await client.status(other.id)).state).toBe('open');
  });

  it('when the service is older than the look-up by item (it refuses ?parentItem= with 400), then a rerun still finds its child', async () => {
    const older = new RollcallClient({
      baseUrl: svc.url,
      fetch: (input, init) =>
        String(input).includes('parentItem=')
          ? Promise.resolve(
              new Response(JSON.stringify({ error: { code: 'invalid_request', message: 'query: Unrecognized key: "parentItem"' } }), {
                status: 400,
                headers: { 'content-type': 'application/json' },
              }),
            )
          : fetch(input, init),
    });
    const parentIds: string[] = [];
    await openBatch(client, { count: 502, enqueue: (ids) => void parentIds.push(...ids) });
    let enqueued = 0;
    const first = await openBatch(older, { count: 2, parentItem: parentIds[0]!, enqueue: (ids) => void (enqueued += ids.length) });
    for (let at = 1; at < parentIds.length; at += 50) await Promise.all(parentIds.slice(at, at + 50).map((item) => client.open({ parentItem: item }))); // 501 newer children: it is on the second page
    const again = await openBatch(older, { count: 2, parentItem: parentIds[0]!, enqueue: (ids) => void (enqueued += ids.length) });
    expect([again.id, again.state, enqueued]).toEqual([first.id, 'sealed', 2]);
  }, 60_000);

  it('when enqueue is not a function (plain JavaScript), then nothing is opened: a TypeError at once', async () => {
    const requests: string[] = [];
    const watching = new RollcallClient({ baseUrl: svc.url, fetch: (input, init) => (requests.push(String(input)), fetch(input, init)) });
    for (const enqueue of [undefined, 'queue.add', {}]) {
      const refused: unknown = await openBatch(watching, { count: 10, enqueue } as never).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(TypeError);
      expect((refused as Error).message).toBe(`enqueue must be a function, not ${typeof enqueue}`);
    }
    expect(requests).toEqual([]);
  });

  it('when the count is 0, then the batch is complete at once and enqueue is never called', async () => {
    let calls = 0;
    expect((await openBatch(client, { count: 0, enqueue: async () => void calls++ })).state).toBe('complete');
    expect(calls).toBe(0);
  });
});
