import { once } from 'node:events';
import net from 'node:net';

import { RollcallClient } from '../../src/client';
import { Backend, backends, isPostgresBackend, processEnv, TestDatabase } from '../helpers/backends';
import { freePorts } from '../helpers/ports';
import { call, spawnService } from '../helpers/processes';
import { Delivery, Receiver } from '../helpers/receiver';
import { holdBatchRow, holdSqliteFile, otherConnections, untilLockWaited } from '../helpers/rowLocks';

/**
 * Holds the batch's lock as another replica (or, on SQLite, another process) would, so that an ack
 * sent now stays in the service until `release`; `ackWaits` resolves once one waits for it.
 */
async function holdBatch(database: TestDatabase, id: string): Promise<{ ackWaits(): Promise<void>; release(): Promise<void> }> {
  if (database.name === 'sqlite') {
    const file = await holdSqliteFile(database.config.SQLITE_PATH as string, 20_000);
    // A waiting ack cannot be seen from outside on SQLite; its request is on its way for this long.
    return { ackWaits: () => new Promise((resolve) => setTimeout(resolve, 500)), release: file.release };
  }
  const other = otherConnections(database, 2);
  const release = await holdBatchRow(other, id);
  let destroyed = false;
  return {
    ackWaits: () => untilLockWaited(other, isPostgresBackend(database.name)),
    release: async () => {
      await release();
      if (!destroyed) await other.destroy();
      destroyed = true;
    },
  };
}

/** Resolves once the service holds `count` long-polls (its gauge, read by another connection). */
async function untilWaitsHeld(url: string, count: number): Promise<void> {
  for (const deadline = Date.now() + 10_000; ;) {
    const metrics = await (await fetch(`${url}/metrics`)).text();
    if (Number(/^rollcall_waits_held (\d+)$/m.exec(metrics)?.[1]) >= count) return;
    if (Date.now() > deadline) throw new Error(`the service did not hold ${count} waits in 10 s`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe.each(backends())('SIGTERM (%s)', (_name, backend) => {
  jest.setTimeout(60_000);

  it('when the service gets SIGTERM, then open waits and in-flight acks are answered and it exits 0', async () => {
    const database = await backend.create();
    const service = await spawnService({ ...processEnv(database), LOCK_TIMEOUT: '15s' });
    let held: Awaited<ReturnType<typeof holdBatch>> | undefined;
    try {
      const id = (await call(`${service.url}/v1/batches`, 'POST', {})).body.id;
      const added = await call(`${service.url}/v1/batches/${id}/items`, 'POST', { count: 5000 });
      await call(`${service.url}/v1/batches/${id}/seal`, 'POST', {});
      const waiting = call(`${service.url}/v1/batches/${id}/wait?timeout=60`, 'GET');
      const ids = Array.from({ length: 5000 }, (_, i) => `${id}:${added.body.groups[0].id}:${i}`);
      // The batch is held so that SIGTERM surely finds the ack in flight, however fast the machine.
      held = await holdBatch(database, id);
      let ackAnswered = false;
      const acking = call(`${service.url}/v1/acks`, 'POST', { ids }).finally(() => (ackAnswered = true));
      await held.ackWaits();
      const exited = new Promise<number | null>((resolve) => service.child.once('exit', (code) => resolve(code)));
      service.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 300));
      expect(ackAnswered).toBe(false); // still in flight after SIGTERM
      expect(service.child.exitCode).toBeNull(); // draining, not gone
      await held.release();
      const [wait, ack, code] = await Promise.all([waiting, acking, exited]);
      expect(ack.status).toBe(200);
      expect(ack.body.acked).toBe(5000);
      expect(wait.status).toBe(200);
      expect(['sealed', 'complete']).toContain(wait.body.state);
      expect(code).toBe(0);
    } finally {
      await held?.release();
      await service.stop();
      await database.drop();
    }
  });

  it('when the service gets SIGTERM while callback receivers hang, then it exits 0 at once and the next process sends the events without waiting out their leases', async () => {
    const database = await backend.create();
    const receiver = new Receiver();
    await receiver.start();
    receiver.fallback = 'hang';
    // A POST may take 30 s and holds its claim 35 s: past the shutdown's 10 s and the test's wait
    // below. 64 slots, a quarter of them for one host: all 12 events are sent at once.
    const env = { ...processEnv(database), CALLBACK_TIMEOUT: '30s', CALLBACK_POLL_INTERVAL: '200ms', CALLBACK_CONCURRENCY: '64' };
    let service = await spawnService(env);
    let stderr = '';
    service.child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    try {
      const client = new RollcallClient({ baseUrl: service.url });
      for (let i = 0; i < 12; i++) await client.seal((await client.open({ callbackUrl: receiver.url })).id); // empty: complete at once
      await receiver.waitFor(12);
      const exited = new Promise<number | null>((resolve) => service.child.once('exit', (code) => resolve(code)));
      const stopping = performance.now();
      await service.stop();
      expect(await exited).toBe(0);
      // At once: the hanging POSTs get the dispatcher's 1 s grace, not SHUTDOWN_TIMEOUT_MS (10 s).
      expect(performance.now() - stopping).toBeLessThan(4_000);
      // Each POST under way listened to the shutdown's signal: past 10, Node warned of a leak.
      expect(stderr).not.toContain('MaxListenersExceededWarning');
      receiver.fallback = 200;
      service = await spawnService(env);
      await receiver.waitFor(24, 15_000);
      const eventIds = (deliveries: Delivery[]) => deliveries.map((d) => d.headers['x-rollcall-event-id']).sort();
      expect(eventIds(receiver.deliveries.slice(12))).toEqual(eventIds(receiver.deliveries.slice(0, 12)));
      expect(receiver.deliveries.slice(12).every((d) => d.answered?.status === 200)).toBe(true);
    } finally {
      await service.stop();
      await receiver.stop();
      await database.drop();
    }
  });

  it('when the service is restarted (a deploy) while a client waits for a batch, then waitForCompletion rides out the restart and returns the batch complete', async () => {
    const database = await backend.create();
    const [port] = (await freePorts(1)) as [number];
    const env = { ...processEnv(database), PORT: String(port) };
    let service = await spawnService(env);
    let waiting: Promise<unknown> | undefined;
    try {
      const client = new RollcallClient({ baseUrl: service.url });
      const batch = await client.open();
      const added = await client.addItems(batch.id, 2);
      await client.seal(batch.id);
      const [first, second] = [...added.itemIds()] as [string, string];
      await client.ack([first]);
      const wait = client.waitForCompletion(batch.id, { timeoutMs: 45_000 });
      waiting = wait;
      let settled = false;
      void wait.then(
        () => (settled = true),
        () => (settled = true),
      );
      await untilWaitsHeld(service.url, 1);
      const exited = new Promise<number | null>((resolve) => service.child.once('exit', (code) => resolve(code)));
      // SIGTERM answers the open wait ('sealed'); the client asks again at once on its kept-alive
      // connection, and must be neither held nor answered keep-alive: within SHUTDOWN_TIMEOUT, exit 0.
      await service.stop();
      expect(await exited).toBe(0);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(settled).toBe(false); // the client asked again, and was refused
      service = await spawnService(env);
      await client.ack([second]);
      const done = await wait;
      expect(done.state).toBe('complete');
      expect(done.id).toBe(batch.id);
    } finally {
      await service.stop();
      // A failed expectation leaves the wait asking a stopped service: it must end before the test does.
      await waiting?.catch(() => undefined);
      await database.drop();
    }
  });
});

describe('SIGTERM while a client is part way through a request (sqlite)', () => {
  jest.setTimeout(60_000);
  const [, sqlite] = backends()[0] as [string, Backend];

  const headersPart = 'POST /v1/batches HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n';
  const bodyPart = 'POST /v1/batches HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{"userKey":';

  it.each([
    ['only part of its headers, and no answer is under way', headersPart, false],
    ['only part of its headers, and a wait is held (the cut comes once it is answered)', headersPart, true],
    ['its headers and part of its body (the cut comes after half of SHUTDOWN_TIMEOUT_MS)', bodyPart, false],
  ])(
    'when a client has sent %s as SIGTERM comes (stalled or slow), then its connection is cut and the service exits 0, not held to SHUTDOWN_TIMEOUT_MS',
    async (_what, sent, withWait) => {
      const database = await sqlite.create();
      // Node stops enforcing headersTimeout and requestTimeout once the server is closed: without the cut, exit 1 at this.
      const service = await spawnService({ ...processEnv(database), SHUTDOWN_TIMEOUT_MS: '8000' });
      let socket: net.Socket | undefined;
      let waiting: ReturnType<typeof call> | undefined;
      try {
        if (withWait) waiting = call(`${service.url}/v1/batches/${(await call(`${service.url}/v1/batches`, 'POST', {})).body.id}/wait?timeout=60`, 'GET');
        if (withWait) await untilWaitsHeld(service.url, 1);
        socket = net.connect(Number(new URL(service.url).port), '127.0.0.1');
        await once(socket, 'connect');
        socket.on('error', () => undefined);
        const cut = once(socket, 'close');
        socket.write(sent);
        await new Promise((resolve) => setTimeout(resolve, 300)); // the service has read it: the connection is not idle
        const exited = new Promise<number | null>((resolve) => service.child.once('exit', (code) => resolve(code)));
        const signalled = performance.now();
        service.child.kill('SIGTERM');
        expect(await exited).toBe(0);
        await cut;
        if (sent === bodyPart) expect(performance.now() - signalled).toBeGreaterThanOrEqual(3_900); // the body had its 4 s
        if (waiting) expect((await waiting).body.state).toBe('open'); // answered with the state at the drain
      } finally {
        socket?.destroy();
        await service.stop();
        await waiting?.catch(() => undefined);
        await database.drop();
      }
    },
  );
});
