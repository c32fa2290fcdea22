import { createRollcall } from '../../src/rollcall';
import { backends } from '../helpers/backends';
import { serve, startService, TestApp, TestService } from '../helpers/service';

/**
 * Deleting a batch removes the links of its children and its own link to its parent. Found in an
 * adversarial review: on MariaDB its own link was deleted by a column without an index, a scan that
 * locked every link, so deletes of batches with children deadlocked each other (503 after retries).
 */
describe.each(backends())('deleting parents and children at once, on two service instances (%s)', (_name, backend) => {
  let svc: TestService;
  let second: TestApp;
  beforeAll(async () => {
    svc = await startService(backend);
    second = await serve(await createRollcall(svc.database.config));
  });
  afterAll(async () => {
    await second.stop();
    await svc.stop();
  });

  const retries = async () => Number(/^rollcall_transaction_retries_total (\d+)$/m.exec((await svc.api.get('/metrics')).text)?.[1] ?? 0);

  it('when 40 parents and their children are deleted while more children are made, then each answers at once, without a deadlock', async () => {
    const families = await Promise.all(
      Array.from({ length: 40 }, async () => {
        const parent = await svc.client.open();
        const itemIds = [...(await svc.client.addItems(parent.id, 2)).itemIds()];
        const child = await svc.client.open({ parentItem: itemIds[0] });
        return { parent: parent.id, child: child.id, freeItem: itemIds[1] as string };
      }),
    );
    const before = (await retries()) + Number(/^rollcall_transaction_retries_total (\d+)$/m.exec((await second.api.get('/metrics')).text)?.[1] ?? 0);
    const apps = [svc, second];
    const answers = await Promise.all(
      families.flatMap(({ parent, child, freeItem }, i) => [
        apps[i % 2]!.api.delete(`/v1/batches/${parent}`),
        apps[(i + 1) % 2]!.api.delete(`/v1/batches/${child}`),
        apps[i % 2]!.api.post('/v1/batches').send({ parentItem: freeItem }),
      ]),
    );
    const statuses = answers.map((res) => res.status);
    expect(statuses.filter((status, i) => i % 3 !== 2)).toEqual(Array(80).fill(204));
    // A child made before its parent's delete is 201; after it, its parent item is unknown (4xx).
    expect(statuses.filter((status, i) => i % 3 === 2 && status >= 500)).toEqual([]);
    const after = (await retries()) + Number(/^rollcall_transaction_retries_total (\d+)$/m.exec((await second.api.get('/metrics')).text)?.[1] ?? 0);
    expect(after - before).toBe(0);
  });
});
