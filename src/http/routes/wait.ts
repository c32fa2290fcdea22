import { Router } from 'express';

import { CompletionWatcher } from '../../service/completionWatcher';
import { requireScope } from '../auth';
import { batchIdOf } from '../params';
import { waitQuery } from '../schemas';
import { parse } from '../validate';

/** GET …/wait: answers when the batch is complete or cancelled, or at the timeout; a closed request stops waiting. */
export function waitRoutes(watcher: CompletionWatcher): Router {
  const router = Router();
  router.get('/v1/batches/:batchId/wait', requireScope('read'), async (req, res) => {
    const { timeout } = parse(waitQuery, req.query, 'query');
    const abandoned = new AbortController();
    const gone = () => {
      if (!res.writableFinished) abandoned.abort();
    };
    res.on('close', gone);
    // A pipelined wait's answer waits behind the one before it and never closes when the client
    // goes; its request does. Not any request's close: one whose body was read (a GET sent with a
    // JSON body, even an empty one) closes then, while its client still waits.
    req.on('close', () => {
      if (req.socket.destroyed) gone();
    });
    res.json(await watcher.wait(req.caller, batchIdOf(req), Math.round(timeout * 1000), abandoned.signal));
  });
  return router;
}
