import { lockDueBatches, sweepShapeOf } from '../../src/store/removeBatches';
import { inTransaction } from '../../src/store/transaction';
import { mysqlBackend } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

const mysql = mysqlBackend();
const describeOnMysql = mysql ? describe : describe.skip;
const DAY = 86_400_000;

describeOnMysql('a sweep transaction holding its locks (mysql)', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(mysql!, { OPEN_BATCH_TTL: '1d' });
  });
  afterAll(() => svc.stop());

  it('when a sweep has locked the due batches, then acks of batches that are not due are answered at once', async () => {
    for (let i = 0; i < 5; i++) await svc.api.post('/v1/batches').send({}); // stale, open
    svc.clock.now += 2 * DAY;
    const fresh = await Promise.all([batchWith(svc.client, 3), batchWith(svc.client, 3)]);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let locked: string[] = [];
    const shape = await sweepShapeOf(svc.rollcall.db);
    const sweeping = inTransaction(svc.rollcall.db, { retries: 0 }, async (trx) => {
      ({ locked } = await lockDueBatches(trx, { idleBefore: svc.clock.now - DAY, completedBefore: 0 }, 1, new Set(), shape));
      await held; // the sweep's locks stay held while the acks below run
    });
    try {
      while (locked.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      for (const batch of fresh) {
        const started = performance.now();
        const res = await svc.api.post('/v1/acks').send({ ids: batch.ids });
        expect(res.status).toBe(200);
        expect(res.body.completed).toHaveLength(1);
        expect(performance.now() - started).toBeLessThan(1000);
      }
    } finally {
      release();
      await sweeping;
    }
  }, 30_000);
});
