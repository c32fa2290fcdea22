import { Router } from 'express';
import { AckCall, callFromIds } from '../../domain/ackPlan';
import { PayloadTooLargeError } from '../../domain/errors';
import { AckResult } from '../../service/ackItems';
import { ackBody, MAX_ACK_IDS } from '../schemas';
import { parse } from '../validate';

/** Applies one ack call: through the group committer, or in a transaction of its own. */
export type SubmitAck = (call: AckCall) => Promise<AckResult>;

/** Consumer route: POST /v1/acks. */
export function ackRoutes(submit: SubmitAck): Router {
  const router = Router();
  router.post('/v1/acks', async (req, res) => {
    const body = parse(ackBody, req.body, 'body');
    if (body.ids.length > MAX_ACK_IDS) {
      throw new PayloadTooLargeError(`an ack call takes at most ${MAX_ACK_IDS} IDs; this one has ${body.ids.length}`);
    }
    res.json(await submit(callFromIds(body.ids, body.outcome ?? 'succeeded')));
  });
  return router;
}
