import { backends, processEnv } from '../helpers/backends';
import { call, spawnService } from '../helpers/processes';

describe.each(backends())('SIGTERM (%s)', (_name, backend) => {
  jest.setTimeout(60_000);

  it('when the service gets SIGTERM, then open waits and in-flight acks are answered and it exits 0', async () => {
    const database = await backend.create();
    // A long group-commit window holds the ack in the service, so SIGTERM surely finds it in flight.
    const service = await spawnService({ ...processEnv(database), ACK_GROUP_COMMIT_WINDOW_MS: '50' });
    try {
      const id = (await call(`${service.url}/v1/batches`, 'POST', {})).body.id;
      const added = await call(`${service.url}/v1/batches/${id}/items`, 'POST', { count: 5000 });
      await call(`${service.url}/v1/batches/${id}/seal`, 'POST', {});
      const waiting = call(`${service.url}/v1/batches/${id}/wait?timeout=60`, 'GET');
      const ids = Array.from({ length: 5000 }, (_, i) => `${id}:${added.body.groups[0].id}:${i}`);
      await new Promise((r) => setTimeout(r, 200));
      const acking = call(`${service.url}/v1/acks`, 'POST', { ids });
      const exited = new Promise<number | null>((resolve) => service.child.once('exit', (code) => resolve(code)));
      setTimeout(() => service.child.kill('SIGTERM'), 25);
      const [wait, ack, code] = await Promise.all([waiting, acking, exited]);
      expect(ack.status).toBe(200);
      expect(ack.body.acked).toBe(5000);
      expect(wait.status).toBe(200);
      expect(['sealed', 'complete']).toContain(wait.body.state);
      expect(code).toBe(0);
    } finally {
      await service.stop();
      await database.drop();
    }
  });
});
