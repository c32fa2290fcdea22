import { backends, processEnv } from '../helpers/backends';
import { call, spawnService } from '../helpers/processes';
import { Receiver } from '../helpers/receiver';
import { itemIds } from '../helpers/service';

describe.each(backends())('a service killed between completion and delivery (%s)', (_name, backend) => {
  jest.setTimeout(90_000);

  it('when the process is killed -9 mid-delivery and restarted, then the callback arrives, same event id', async () => {
    const database = await backend.create();
    const receiver = new Receiver();
    await receiver.start();
    const env = { ...processEnv(database), CALLBACK_TIMEOUT: '1s', CALLBACK_BACKOFF_BASE: '100ms', CALLBACK_POLL_INTERVAL: '100ms' };
    let service = await spawnService(env);
    try {
      receiver.script = ['hang']; // the first attempt never gets an answer
      const id = (await call(`${service.url}/v1/batches`, 'POST', { callbackUrl: receiver.url })).body.id;
      const added = await call(`${service.url}/v1/batches/${id}/items`, 'POST', { count: 3 });
      await call(`${service.url}/v1/batches/${id}/seal`, 'POST', {});
      const ack = await call(`${service.url}/v1/acks`, 'POST', { ids: itemIds(id, added.body.groups) });
      expect(ack.body.completed).toHaveLength(1);
      await receiver.waitFor(1);
      await service.stop('SIGKILL');

      service = await spawnService(env);
      await receiver.waitFor(2);
      const [first, second] = receiver.deliveries;
      expect(second!.headers['x-rollcall-event-id']).toBe(first!.headers['x-rollcall-event-id']);
      expect(JSON.parse(second!.body)).toMatchObject({ event: 'batch.completed', batch: { id, state: 'complete' } });
      let events: Array<{ status: string }> = [];
      for (let i = 0; i < 50; i++) {
        events = (await call(`${service.url}/v1/batches/${id}/events`, 'GET')).body.events;
        if (events[0]?.status === 'delivered') break;
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(events).toEqual([expect.objectContaining({ status: 'delivered', attempts: 2 })]);
    } finally {
      await service.stop();
      await receiver.stop();
      await database.drop();
    }
  });
});
