import { httpSend, RollcallClient } from '../../src/client';
import { AckCoalescer } from '../../src/integrations/ackCoalescer';
import { backends, describeEachOrSkip, serverBackends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { countingFetch } from '../helpers/countingFetch';
import { realSleep } from '../helpers/realTime';
import { holdBatchRow, serviceWithRowHolder } from '../helpers/rowLocks';
import { startService, TestService } from '../helpers/service';

const [, sqlite] = backends()[0]!;

describe('the ack coalescer of the queue integrations, against a real service', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(sqlite);
  });
  afterAll(async () => {
    await svc.stop();
  });

  it('when 25,000 items are acked at once, then calls carry ≤ 10,000 and each answer follows its commit', async () => {
    const { id, ids } = await batchWith(svc.client, 25_000);
    const tally = countingFetch();
    const client = new RollcallClient({ baseUrl: svc.url, fetch: tally.fetch });
    const acks = new AckCoalescer(client);
    const committedWhenAnswered: boolean[] = [];
    const probe = new RollcallClient({ baseUrl: svc.url });
    await Promise.all(
      ids.map(async (itemId, i) => {
        expect(await acks.ack(itemId, 'succeeded')).toBeNull();
        if (i % 1000 === 0) committedWhenAnswered.push((await probe.item(itemId)).state === 'succeeded');
      }),
    );
    expect(committedWhenAnswered).toEqual(Array(25).fill(true));
    expect(tally.largestCall).toBeLessThanOrEqual(10_000);
    expect(tally.calls).toBeLessThanOrEqual(4);
    expect(tally.completions.get(id)).toBe(1);
  });

  it('when rollcall is away while acks keep coming, then they gather into a few calls, not one per maxDelayMs each sent again on its own', async () => {
    const { id, ids } = await batchWith(svc.client, 60);
    const send = httpSend();
    let away = true;
    const calls = new Set<string>(); // distinct calls, by the IDs they carry
    const client = new RollcallClient({
      baseUrl: svc.url,
      fetch: (url, request) => {
        if (!url.endsWith('/v1/acks')) return send(url, request);
        calls.add(String(request.body));
        if (away) return Promise.resolve(new Response('{"error":{"code":"unavailable","message":"away"}}', { status: 503 }));
        return send(url, request);
      },
    });
    const acks = new AckCoalescer(client, { maxDelayMs: 10 });
    const answers: Array<Promise<unknown>> = [];
    for (const itemId of ids) {
      answers.push(acks.ack(itemId, 'succeeded'));
      await realSleep(20); // a job ends every 20 ms, twice maxDelayMs
    }
    away = false;
    expect(await Promise.all(answers)).toEqual(ids.map(() => null));
    expect(calls.size).toBeLessThanOrEqual(4); // the first, sent again; the rest gathered (was 60: one a job)
    expect(await svc.client.status(id)).toMatchObject({ state: 'complete', succeeded: 60 });
  });

  it('when acks wait through an outage for the call out to end, then each is held retryForMs from its making, not that long again once its own call goes', async () => {
    const { ids } = await batchWith(svc.client, 2);
    const send = httpSend();
    const client = new RollcallClient({
      baseUrl: svc.url,
      fetch: (url, request) =>
        url.endsWith('/v1/acks') ? Promise.resolve(new Response('{"error":{"code":"unavailable","message":"away"}}', { status: 503 })) : send(url, request),
    });
    const acks = new AckCoalescer(client, { maxDelayMs: 10, retryForMs: 1_500 });
    const given = (ack: Promise<unknown>) =>
      ack.then(
        () => Infinity,
        () => performance.now(),
      );
    const first = given(acks.ack(ids[0]!, 'succeeded'));
    await realSleep(500);
    const madeAt = performance.now();
    const second = given(acks.ack(ids[1]!, 'succeeded')); // waits for the first's call, out and being sent again
    expect(await first).toBeLessThan(Infinity);
    expect((await second) - madeAt).toBeLessThan(1_500 + 700); // was about 1,000 + 1,500: its own call's retryForMs began late
  });

  it('when outcomes, reasons and an unknown item arrive together, then each gets its own answer', async () => {
    const { id, ids } = await batchWith(svc.client, 4);
    const acks = new AckCoalescer(new RollcallClient({ baseUrl: svc.url }));
    const unknown = `${id}:01234567-89ab-7def-8123-456789abcdef:0`;
    const answers = await Promise.all([
      acks.ack(ids[0]!, 'succeeded'),
      acks.ack(ids[1]!, 'failed', 'disk full'),
      acks.ack(ids[2]!, 'failed', 'x'.repeat(5000)), // longer than the API takes: cut, not refused
      acks.ack(unknown, 'succeeded'),
      acks.ack(ids[3]!, 'succeeded'),
    ]);
    expect(answers).toEqual([null, null, null, 'unknown_group', null]);
    const reasons = new Map((await new RollcallClient({ baseUrl: svc.url }).failures(id)).failures.map((f) => [f.id, f.error]));
    expect(reasons).toEqual(
      new Map([
        [ids[1], 'disk full'],
        [ids[2], 'x'.repeat(1000)],
      ]),
    );
  });

  it('when a failure message holds what the service refuses, then it is recorded with U+FFFD in its place; one of over 1,000 emoji is cut after the 1,000th', async () => {
    const { id, ids } = await batchWith(svc.client, 3);
    const acks = new AckCoalescer(new RollcallClient({ baseUrl: svc.url }));
    const emoji = '\u{1F600}'.repeat(1001); // 1,001 characters in 2,002 UTF-16 units: a cut by units would split a pair
    const answers = await Promise.all([
      acks.ack(ids[0]!, 'failed', 'bad\u0000byte'),
      acks.ack(ids[1]!, 'failed', 'half \ud800 pair'),
      acks.ack(ids[2]!, 'failed', emoji),
    ]);
    expect(answers).toEqual([null, null, null]);
    const reasons = new Map((await new RollcallClient({ baseUrl: svc.url }).failures(id)).failures.map((f) => [f.id, f.error]));
    expect(reasons).toEqual(
      new Map([
        [ids[0], 'bad\uFFFDbyte'],
        [ids[1], 'half \uFFFD pair'],
        [ids[2], '\u{1F600}'.repeat(1000)],
      ]),
    );
  });
  it('when another worker of the process keeps acking through the same coalescer, then drain() still resolves once the acks made before it are answered', async () => {
    const { ids } = await batchWith(svc.client, 5000);
    const acks = new AckCoalescer(new RollcallClient({ baseUrl: svc.url }));
    let next = 1;
    let streaming = true;
    const stream = (async () => {
      while (streaming && next < ids.length) {
        void acks.ack(ids[next++]!, 'succeeded');
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
    })();
    try {
      await new Promise((resolve) => setTimeout(resolve, 50)); // the other worker is busy
      let mine: unknown = 'unanswered';
      void acks.ack(ids[0]!, 'succeeded').then((answer) => (mine = answer));
      const drained = await Promise.race([
        acks.drain().then(() => 'drained'),
        new Promise((resolve) => setTimeout(() => resolve('still draining after 5 s'), 5000)),
      ]);
      expect(drained).toBe('drained');
      expect(mine).toBeNull(); // answered by then
      expect(streaming && next < ids.length).toBe(true); // and the other worker was still acking
    } finally {
      streaming = false;
      await stream;
      await acks.drain();
    }
  });
});

describe('the ack coalescer against a service whose BODY_LIMIT is below a full call', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(sqlite, { BODY_LIMIT: '20kb' }); // ~230 IDs a call
  });
  afterAll(async () => {
    await svc.stop();
  });

  /** A coalescer whose calls are recorded as [IDs in the call, the answer's status]. */
  function sizeRecordingCoalescer(): { acks: AckCoalescer; sizes: Array<[number, number]> } {
    const send = httpSend();
    const sizes: Array<[number, number]> = [];
    const acks = new AckCoalescer(
      new RollcallClient({
        baseUrl: svc.url,
        fetch: async (url, request) => {
          const answer = await send(url, request);
          sizes.push([(JSON.parse(String(request.body)) as { ids: string[] }).ids.length, answer.status]);
          return answer;
        },
      }),
    );
    return { acks, sizes };
  }

  it('when 3,000 acks gather into calls the service refuses as too large (413), then they are sent in halves, every one is recorded, and later calls fit', async () => {
    const { id, ids } = await batchWith(svc.client, 3000);
    const send = httpSend();
    const statuses: number[] = [];
    const acks = new AckCoalescer(
      new RollcallClient({
        baseUrl: svc.url,
        fetch: async (url, request) => {
          const answer = await send(url, request);
          statuses.push(answer.status);
          return answer;
        },
      }),
    );
    const firstHalf = ids.slice(0, 1500);
    expect(await Promise.all(firstHalf.map((itemId) => acks.ack(itemId, 'succeeded')))).toEqual(firstHalf.map(() => null));
    expect(statuses).toContain(413);
    statuses.length = 0;
    const secondHalf = ids.slice(1500);
    expect(await Promise.all(secondHalf.map((itemId) => acks.ack(itemId, 'failed', 'no disk')))).toEqual(secondHalf.map(() => null));
    expect(await svc.client.status(id)).toMatchObject({ succeeded: 1500, failed: 1500, pending: 0 });
    // The first acks taught the coalescer the size: the next 1,500 went in calls the service took.
    expect(statuses.length).toBeGreaterThan(1);
    expect(statuses.every((status) => status === 200)).toBe(true);
  });

  it('when a call refused as too large goes again in parts and a later part cannot be sent, then the acks of the parts taken still count as recorded', async () => {
    const { id, ids } = await batchWith(svc.client, 460); // ~230 fit a call: refused, then two parts
    const send = httpSend();
    const taken: number[] = [];
    const acks = new AckCoalescer(
      new RollcallClient({
        baseUrl: svc.url,
        fetch: async (url, request) => {
          // Once a part is taken, the next is refused before it reaches the service (a token revoked meanwhile).
          if (taken.length > 0) return { ok: false, status: 403, text: async () => '{"error":{"code":"forbidden","message":"revoked"}}' };
          const answer = await send(url, request);
          if (answer.status === 200) taken.push((JSON.parse(String(request.body)) as { ids: string[] }).ids.length);
          return answer;
        },
      }),
      { retryForMs: 0 },
    );
    const answers = await Promise.all(ids.map((itemId) => acks.ack(itemId, 'succeeded').catch((error: { status?: number }) => error.status)));
    expect(taken).toEqual([230]);
    // Each ack's answer is its own part's: the 230 taken are recorded (their jobs are not run again), the rest refused.
    expect(answers).toEqual([...Array(230).fill(null), ...Array(230).fill(403)]);
    expect(await svc.client.status(id)).toMatchObject({ succeeded: 230, pending: 230 });
  });

  it('when one long ID that fits alone makes a call too large, then later calls of ordinary IDs stay large (the limit is learnt in characters, not IDs)', async () => {
    const { id, ids } = await batchWith(svc.client, 610);
    const { acks, sizes } = sizeRecordingCoalescer();
    const long = `${id}:${'x'.repeat(19_800)}:0`; // refused by the service as malformed, but it fits in a call alone
    const first = [long, ...ids.slice(0, 10)];
    const answers = await Promise.all(first.map((itemId) => acks.ack(itemId, 'succeeded')));
    expect(answers.slice(1)).toEqual(Array(10).fill(null));
    expect(sizes.some(([, status]) => status === 413)).toBe(true);
    sizes.length = 0;
    const rest = ids.slice(10);
    expect(await Promise.all(rest.map((itemId) => acks.ack(itemId, 'succeeded')))).toEqual(rest.map(() => null));
    expect(await svc.client.status(id)).toMatchObject({ succeeded: 610, pending: 0 });
    // ~240 ordinary IDs fit in 20 kB: the 600 go in a few calls, not hundreds of a handful each.
    expect(sizes.length).toBeLessThanOrEqual(6);
    expect(sizes.every(([, status]) => status === 200)).toBe(true);
  });

  it('when one ID is too large to be sent even alone, then only its ack is refused (payload_too_large), the others are recorded, and calls stay large', async () => {
    const { id, ids } = await batchWith(svc.client, 600);
    const { acks, sizes } = sizeRecordingCoalescer();
    const huge = `${id}:${'x'.repeat(30_000)}:0`;
    const first = [...ids.slice(0, 150), huge, ...ids.slice(150, 300)];
    const answers = await Promise.all(first.map((itemId) => acks.ack(itemId, 'succeeded')));
    expect(answers).toEqual(first.map((itemId) => (itemId === huge ? 'payload_too_large' : null)));
    sizes.length = 0;
    const rest = ids.slice(300);
    expect(await Promise.all(rest.map((itemId) => acks.ack(itemId, 'succeeded')))).toEqual(rest.map(() => null));
    expect(await svc.client.status(id)).toMatchObject({ succeeded: 600, pending: 0 });
    // Not one ID a call for the rest of the process: the 300 others went in a few calls (the first
    // may be refused for its number of IDs, which the huge ID's refusal could not tell).
    expect(sizes.filter(([, status]) => status !== 200).length).toBeLessThanOrEqual(1);
    expect(sizes.length).toBeLessThanOrEqual(3);
  });

  it('when a call of two is refused only for an ID too large alone, then later calls are not kept to one ID', async () => {
    const { id, ids } = await batchWith(svc.client, 201);
    const send = httpSend();
    const sizes: number[] = [];
    const acks = new AckCoalescer(
      new RollcallClient({
        baseUrl: svc.url,
        fetch: async (url, request) => {
          sizes.push((JSON.parse(String(request.body)) as { ids: string[] }).ids.length);
          return send(url, request);
        },
      }),
    );
    const huge = `${id}:${'x'.repeat(30_000)}:0`;
    expect(await Promise.all([acks.ack(ids[0] as string, 'succeeded'), acks.ack(huge, 'succeeded')])).toEqual([null, 'payload_too_large']);
    sizes.length = 0;
    const rest = ids.slice(1);
    expect(await Promise.all(rest.map((itemId) => acks.ack(itemId, 'succeeded')))).toEqual(rest.map(() => null));
    expect(await svc.client.status(id)).toMatchObject({ succeeded: 201, pending: 0 });
    // The 200 fit in one call (~230 do): the ID refused alone says nothing of how many fit.
    expect(sizes).toEqual([200]);
  });

  it('when the service that refused a call as too large is replaced by one that takes it, then calls grow again a minute later', async () => {
    const roomy = await startService(sqlite); // BODY_LIMIT 2mb: a full call fits
    try {
      const small = await batchWith(svc.client, 1000);
      const large = await batchWith(roomy.client, 1000);
      const send = httpSend();
      let to = svc.url; // where the calls go: a deploy that replaces the service behind one address
      const sizes: Array<[number, number]> = [];
      const acks = new AckCoalescer(
        new RollcallClient({
          baseUrl: svc.url,
          fetch: async (url, request) => {
            const answer = await send(url.replace(svc.url, to), request);
            sizes.push([(JSON.parse(String(request.body)) as { ids: string[] }).ids.length, answer.status]);
            return answer;
          },
        }),
      );
      const ackAll = async (ids: string[]) => expect(await Promise.all(ids.map((itemId) => acks.ack(itemId, 'succeeded')))).toEqual(ids.map(() => null));
      await ackAll(small.ids);
      expect(sizes.some(([, status]) => status === 413)).toBe(true);
      to = roomy.url;
      sizes.length = 0;
      await ackAll(large.ids.slice(0, 500)); // within the minute: still the size learnt
      expect(Math.max(...sizes.map(([ids]) => ids))).toBeLessThan(300);
      const realNow = performance.now.bind(performance);
      jest.spyOn(performance, 'now').mockImplementation(() => realNow() + 61_000); // a minute on (the monotonic clock)
      sizes.length = 0;
      await ackAll(large.ids.slice(500));
      expect(sizes).toEqual([[500, 200]]); // one call of all 500, taken
      expect(await roomy.client.status(large.id)).toMatchObject({ succeeded: 1000, pending: 0 });
    } finally {
      jest.restoreAllMocks();
      await roomy.stop();
    }
  });
});

describeEachOrSkip(serverBackends())('the ack coalescer while another connection holds one batch (%s)', (_name, backend) => {
  const service = serviceWithRowHolder(backend);

  it('when acks of a held batch X and of Y share a call, then Y’s are answered within a few LOCK_TIMEOUTs, X’s once it is let go', async () => {
    const { svc, holder } = service;
    const x = await batchWith(svc.client, 2);
    const y = await batchWith(svc.client, 3);
    const acks = new AckCoalescer(new RollcallClient({ baseUrl: svc.url }));
    const release = await holdBatchRow(holder, x.id);
    const unlock = setTimeout(() => void release(), 8000);
    const started = performance.now();
    let xAnswered = false;
    const ofX = Promise.all(x.ids.map((id) => acks.ack(id, 'succeeded'))).finally(() => (xAnswered = true));
    const ofYs = Promise.all(y.ids.map((id) => acks.ack(id, 'succeeded'))); // the same turn: one call with X's
    let drained = false;
    const draining = acks.drain().then(() => (drained = true)); // begun before the split: a worker's stop waits for X's acks too
    const ofY = await ofYs;
    const yMs = performance.now() - started;
    const xPending = (await svc.client.status(x.id)).pending;
    await realSleep(200);
    const whileHeld = { drained, xAnswered };
    clearTimeout(unlock);
    await release();
    expect([ofY, yMs < 5000, xPending, whileHeld]).toEqual([[null, null, null], true, 2, { drained: false, xAnswered: false }]);
    await draining;
    expect(await ofX).toEqual([null, null]);
    expect(await svc.client.status(y.id)).toMatchObject({ state: 'complete', succeeded: 3 });
    expect(await svc.client.status(x.id)).toMatchObject({ state: 'complete', succeeded: 2 });
  }, 30_000);
});
