import { RollcallClient } from '../../src/client';
import { backends, processEnv, TestDatabase } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { call, runClients, ServiceProcess, spawnService } from '../helpers/processes';
import { chunks, shuffled } from '../helpers/service';

type AckResult = { acked: number; duplicates: number; rejected: unknown[]; completed: Array<{ id: string; state: string }> };

describe.each(backends())('several service processes on one database (%s)', (_name, backend) => {
  let database: TestDatabase;
  const services: ServiceProcess[] = [];
  jest.setTimeout(300_000);

  beforeAll(async () => {
    database = await backend.create();
    // The first process migrates; the others find the schema current.
    services.push(await spawnService(processEnv(database)));
    services.push(...(await Promise.all([1, 2].map(() => spawnService(processEnv(database))))));
  });

  afterAll(async () => {
    await Promise.all(services.map((s) => s.stop()));
    await database?.drop();
  });

  const urlFor = (client: number) => services[client % services.length]!.url;

  /** An open batch: the tests seal it themselves, racing their acks. */
  const openWith = (count: number) => batchWith(new RollcallClient({ baseUrl: urlFor(0) }), count, { sealed: false });

  it('when 32 clients ack 200,000 items via 3 processes, 10% duplicates, seal racing, then counts exact', async () => {
    const { id, ids } = await openWith(200_000);
    const sent = shuffled([...ids, ...shuffled(ids, 3).slice(0, 20_000)], 11);
    const work = chunks(sent, 500);
    const sealAt = work.length - 40; // the seal goes out while the last 40 chunks are still in flight
    let done = 0;
    let acked = 0;
    let duplicates = 0;
    const completions: string[] = [];
    let sealResponse: { status: number; body: any } | null = null;
    let sealing: Promise<void> | null = null;

    await runClients(work, 32, async (chunk, client) => {
      const res = await call(`${urlFor(client)}/v1/acks`, 'POST', { ids: chunk });
      expect(res.status).toBe(200);
      const body = res.body as AckResult;
      expect(body.acked + body.duplicates + body.rejected.length).toBe(chunk.length);
      acked += body.acked;
      duplicates += body.duplicates;
      completions.push(...body.completed.map((b) => `ack:${b.id}`));
      if (++done === sealAt) {
        sealing = call(`${urlFor(client + 1)}/v1/batches/${id}/seal`, 'POST', { expectedItems: 200_000 }).then((r) => {
          sealResponse = r;
        });
      }
    });
    await sealing;
    expect(sealResponse!.status).toBe(200);
    if (sealResponse!.body.state === 'complete') completions.push(`seal:${id}`);

    expect(acked).toBe(200_000);
    expect(duplicates).toBe(20_000);
    expect(completions).toHaveLength(1);
    const final = await call(`${urlFor(2)}/v1/batches/${id}`, 'GET');
    expect(final.body).toMatchObject({ state: 'complete', outcome: 'succeeded', total: 200_000, succeeded: 200_000, failed: 0, pending: 0 });
  });

  it('when the seal races the final acks and duplicates 60 times over, then each batch completes once', async () => {
    const rounds = 60;
    const tally: Array<{ seal: boolean; acks: number }> = [];
    for (let round = 0; round < rounds; round++) {
      const { id, ids } = await openWith(40);
      // Everything but the last three items is acked first; the rest race the seal.
      await call(`${urlFor(round)}/v1/acks`, 'POST', { ids: ids.slice(0, 37) });
      const last = ids.slice(37);
      const outcome = round % 3 === 0 ? 'failed' : 'succeeded';
      // Most rounds are a pure race; every 4th lets the acks, and every 4th the seal, start 20 ms
      // late, so both ways of finishing a batch are exercised whatever the timing of the machine.
      const sealDelay = round % 4 === 1 ? 20 : 0;
      const ackDelay = round % 4 === 2 ? 20 : 0;
      const later = <T>(ms: number, f: () => Promise<T>) => new Promise<T>((resolve, reject) => setTimeout(() => f().then(resolve, reject), ms));
      const racers: Array<Promise<{ status: number; body: any }>> = [
        later(sealDelay, () => call(`${urlFor(round)}/v1/batches/${id}/seal`, 'POST', {})),
        ...last.map((itemId, i) => later(ackDelay, () => call(`${urlFor(round + i + 1)}/v1/acks`, 'POST', { ids: [itemId], outcome }))),
        later(ackDelay, () => call(`${urlFor(round + 2)}/v1/acks`, 'POST', { ids: last, outcome })),
        later(ackDelay, () => call(`${urlFor(round + 1)}/v1/acks`, 'POST', { ids: [...last].reverse(), outcome })),
      ];
      const [seal, ...acks] = await Promise.all(racers);
      expect(seal!.status).toBe(200);
      const ackCompletions = acks.reduce((n, r) => n + (r.body as AckResult).completed.length, 0);
      const ackedTotal = acks.reduce((n, r) => n + (r.body as AckResult).acked, 0);
      expect(ackedTotal).toBe(3);
      tally.push({ seal: seal!.body.state === 'complete', acks: ackCompletions });
      const final = await call(`${urlFor(round)}/v1/batches/${id}`, 'GET');
      expect(final.body).toMatchObject({ state: 'complete', pending: 0, outcome: outcome === 'failed' ? 'failed' : 'succeeded' });
    }
    for (const round of tally) expect(Number(round.seal) + round.acks).toBe(1);
    // Both orders happened: sometimes the seal finished the batch, sometimes an ack did.
    expect(tally.some((r) => r.seal)).toBe(true);
    expect(tally.some((r) => r.acks === 1)).toBe(true);
  });

  it('when the same keyed add is sent 6 times at once through 3 processes, 20 times over, then each batch gets its items once and every answer is the same', async () => {
    const count = 10_000; // two groups
    for (let round = 0; round < 20; round++) {
      const { id } = await openWith(0);
      const adds = Array.from({ length: 6 }, (_, i) =>
        fetch(`${urlFor(round + i)}/v1/batches/${id}/items`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': `round-${round}` },
          body: JSON.stringify({ count }),
        }).then(async (res) => ({ status: res.status, body: (await res.json()) as { total: number; groups: unknown[] } })),
      );
      const answers = await Promise.all(adds);
      expect(answers.map((a) => a.status)).toEqual(Array(6).fill(201));
      for (const answer of answers) expect(answer.body).toEqual(answers[0]!.body);
      expect(answers[0]!.body.total).toBe(count);
      const batch = await call(`${urlFor(round)}/v1/batches/${id}`, 'GET');
      expect(batch.body).toMatchObject({ total: count, pending: count });
    }
  });
});
