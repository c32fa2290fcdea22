import { Router } from 'express';

import { addItems } from '../../service/addItems';
import { cancelBatch } from '../../service/cancelBatch';
import { deleteBatch } from '../../service/deleteBatch';
import { ServiceDeps } from '../../service/deps';
import { listFailures } from '../../service/listFailures';
import { openBatch } from '../../service/openBatch';
import { getBatch, listBatchPage } from '../../service/readBatches';
import { sealBatch } from '../../service/sealBatch';
import { requireScope } from '../auth';
import { batchIdOf } from '../params';
import { addItemsBody, createBatchBody, failuresQuery, idempotencyKeyHeader, listQuery, noFieldsBody, sealBody } from '../schemas';
import { parse } from '../validate';

/** Producer and reader routes of /v1/batches: parse, call one use case, shape the reply. */
export function batchRoutes(deps: ServiceDeps): Router {
  const router = Router();
  const produce = requireScope('produce');
  const read = requireScope('read');

  router.post('/v1/batches', produce, async (req, res) => {
    const input = parse(createBatchBody, req.body ?? {}, 'body');
    const batch = await openBatch(deps, req.caller, {
      userKey: input.userKey ?? undefined,
      metadata: input.metadata ?? undefined,
      callbackUrl: input.callbackUrl ?? undefined,
      parentItem: input.parentItem ?? undefined,
    });
    res.status(201).json(batch);
  });

  router.get('/v1/batches', read, async (req, res) => {
    const query = parse(listQuery, req.query, 'query');
    res.json(await listBatchPage(deps, req.caller, query));
  });

  router.get('/v1/batches/:batchId', read, async (req, res) => {
    res.json(await getBatch(deps, req.caller, batchIdOf(req)));
  });

  router.get('/v1/batches/:batchId/failures', read, async (req, res) => {
    const query = parse(failuresQuery, req.query, 'query');
    res.json(await listFailures(deps, req.caller, batchIdOf(req), query));
  });

  router.post('/v1/batches/:batchId/items', produce, async (req, res) => {
    const { count } = parse(addItemsBody, req.body, 'body');
    const key = parse(idempotencyKeyHeader, req.get('idempotency-key'), 'Idempotency-Key');
    res.status(201).json(await addItems(deps, req.caller, batchIdOf(req), count, key));
  });

  router.post('/v1/batches/:batchId/seal', produce, async (req, res) => {
    const { expectedItems } = parse(sealBody, req.body ?? {}, 'body');
    const { batch } = await sealBatch(deps, req.caller, batchIdOf(req), expectedItems);
    res.json(batch);
  });

  router.post('/v1/batches/:batchId/cancel', produce, async (req, res) => {
    parse(noFieldsBody, req.body ?? {}, 'body');
    res.json(await cancelBatch(deps, req.caller, batchIdOf(req)));
  });

  router.delete('/v1/batches/:batchId', produce, async (req, res) => {
    parse(noFieldsBody, req.body ?? {}, 'body');
    await deleteBatch(deps, req.caller, batchIdOf(req));
    res.status(204).end();
  });

  return router;
}
