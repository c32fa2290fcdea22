import { backends, describeEachOrSkip, serverBackends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { realSleep, until } from '../helpers/realTime';
import { ProxiedService, startBehindProxy, startService, TestService } from '../helpers/service';

/**
 * The watcher's poll set to a minute: what answers a wait sooner is the process's own word that
 * the batch ended (an ack or cancel here), or its time running out.
 */
describe.each(backends())('waits woken by the process itself (%s)', (_name, backend) => {
  let svc: TestService | ProxiedService;
  beforeAll(async () => {
    const env = { WAIT_POLL_INTERVAL: '60s' };
    svc = backend.name === 'sqlite' ? await startService(backend, env) : await startBehindProxy(backend, env);
  });
  afterAll(() => svc.stop());

  /** Counts the statements that name `text` from now on: on SQLite as knex runs them, on a server as they reach it. */
  function readsNaming(text: string): { seen(): number; stop(): void } {
    if ('proxy' in svc) return svc.proxy.countSending(text);
    let seen = 0;
    const count = (query: { bindings?: unknown[] }) => void (query.bindings?.includes(text) && (seen += 1));
    svc.rollcall.db.on('query', count);
    return { seen: () => seen, stop: () => void svc.rollcall.db.off('query', count) };
  }

  const timedWait = async (id: string, seconds: number) => {
    const started = performance.now();
    const res = await fetch(`${svc.url}/v1/batches/${id}/wait?timeout=${seconds}`);
    return { status: res.status, batch: (await res.json()) as { state: string }, ms: performance.now() - started };
  };

  it('when an ack or a cancel here ends the batch, then its wait is answered at once, not at the next poll', async () => {
    const acked = await batchWith(svc.client, 3);
    const cancelled = await batchWith(svc.client, 3);
    const ofAcked = timedWait(acked.id, 30);
    const ofCancelled = timedWait(cancelled.id, 30);
    await until(() => svc.rollcall.watcher.holding === 2);
    await realSleep(200); // their first reads done: they wait
    await svc.client.ack(acked.ids);
    await svc.client.cancel(cancelled.id);
    const [a, c] = [await ofAcked, await ofCancelled];
    expect([a.status, a.batch.state, a.ms < 5000]).toEqual([200, 'complete', true]);
    expect([c.status, c.batch.state, c.ms < 5000]).toEqual([200, 'cancelled', true]);
  });

  it('when 300 waits on one batch end together unanswered, then the batch is read again once for them, not once each', async () => {
    const { id } = await batchWith(svc.client, 1);
    const waits = Array.from({ length: 300 }, () => timedWait(id, 2));
    await until(() => svc.rollcall.watcher.holding === 300);
    await realSleep(500); // their first reads done: they wait
    const reads = readsNaming(id);
    try {
      const answers = await Promise.all(waits);
      expect(answers.every((answer) => answer.status === 200 && answer.batch.state === 'sealed')).toBe(true);
    } finally {
      reads.stop();
    }
    expect(reads.seen()).toBeGreaterThan(0); // the count itself works
    expect(reads.seen()).toBeLessThanOrEqual(30); // one per 25 ms over which the waits began (so end); one each, 300
  });
});

describeEachOrSkip(serverBackends())('a wait whose batch ends during its first read (%s)', (_name, backend) => {
  let svc: ProxiedService;
  beforeAll(async () => {
    svc = await startBehindProxy(backend, { WAIT_POLL_INTERVAL: '60s' });
  });
  afterAll(() => svc.stop());

  it('when an ack here ends the batch while the wait reads it, then the wait is answered at once, not at the next poll', async () => {
    const { id, ids } = await batchWith(svc.client, 2);
    // The wait's first read reaches the database (it finds the batch sealed), and its answer is held.
    const readHeld = svc.proxy.freezeConnectionSending(id);
    const started = performance.now();
    const answer = fetch(`${svc.url}/v1/batches/${id}/wait?timeout=20`);
    const letGo = await readHeld;
    await svc.client.ack(ids); // on the pool's other connections: completes the batch here
    await letGo();
    const res = await answer;
    const batch = (await res.json()) as { state: string };
    expect([res.status, batch.state, performance.now() - started < 10_000]).toEqual([200, 'complete', true]);
  });

  it('when a wait times out while the batch is read again for one that timed out before it, then it is not answered with that older read', async () => {
    const { id, ids } = await batchWith(svc.client, 5);
    const first = fetch(`${svc.url}/v1/batches/${id}/wait?timeout=1`);
    await realSleep(300); // its first read done: it waits
    // Its read again, at its timeout, reaches the database (5 pending), and its answer is held.
    const letGo = await svc.proxy.freezeConnectionSending(id);
    await svc.client.ack(ids.slice(0, 2));
    const second = fetch(`${svc.url}/v1/batches/${id}/wait?timeout=0.05`);
    await realSleep(300); // its first read (3 pending) done, and its time up
    await letGo();
    const [a, b] = await Promise.all([first, second]);
    expect(((await b.json()) as { pending: number }).pending).toBe(3); // it was 5: the counts went back
    expect(((await a.json()) as { pending: number }).pending).toBe(5);
  });

  it('when the wait’s first read is slow, then it is answered at its timeout from when it came, not a timeout after that read', async () => {
    const { id } = await batchWith(svc.client, 2);
    const readHeld = svc.proxy.freezeConnectionSending(id);
    const started = performance.now();
    const answer = fetch(`${svc.url}/v1/batches/${id}/wait?timeout=2`);
    const letGo = await readHeld;
    await new Promise((resolve) => setTimeout(resolve, 2_000)); // the read takes the whole timeout
    const readsAfter = svc.proxy.countSending(id);
    await letGo();
    const res = await answer;
    const waited = performance.now() - started;
    readsAfter.stop();
    expect([res.status, ((await res.json()) as { state: string }).state]).toEqual([200, 'sealed']);
    expect(waited).toBeLessThan(3_200); // it was 4 s: the timeout counted from the read's end
    expect(readsAfter.seen()).toBe(0); // answered with that read: not read again, as slowly
  });
});
