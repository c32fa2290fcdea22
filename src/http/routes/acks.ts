import type { RequestHandler } from 'express';

import { AckCall, callFromCompact, callFromIds, compactSize } from '../../domain/ackCall';
import { PayloadTooLargeError } from '../../domain/errors';
import { AckResult } from '../../service/ackItems';
import { requireScope } from '../auth';
import { ackBody, compactAckBody, MAX_ACK_IDS } from '../schemas';
import { parse } from '../validate';

/** Applies one ack call: through the group committer, or in a transaction of its own. */
export type SubmitAck = (call: AckCall) => Promise<AckResult>;

function tooLarge(count: number, atLeast = false): PayloadTooLargeError {
  return new PayloadTooLargeError(`an ack call takes at most ${MAX_ACK_IDS} items; this one has ${atLeast ? 'at least ' : ''}${count}`);
}

/**
 * The elements of the body's arrays, both of them, before any is validated: each names at least one
 * item, so a call past MAX_ACK_IDS is refused without validating (a 2 MB body holds a million of
 * them). Both, since a body may carry both (which the schemas refuse, but only after reading each
 * element): `"ids": []` beside a million `groups` entries skipped the count.
 */
function elementsIn(body: unknown): number {
  if (typeof body !== 'object' || body === null) return 0;
  const { ids, groups } = body as { ids?: unknown; groups?: unknown };
  let n = Array.isArray(ids) ? ids.length : 0;
  if (!Array.isArray(groups)) return n;
  for (const entry of groups as unknown[]) {
    const indexes = typeof entry === 'object' && entry !== null ? (entry as { indexes?: unknown }).indexes : undefined;
    n += Array.isArray(indexes) ? Math.max(1, indexes.length) : 1;
  }
  return n;
}

function withError(call: AckCall, error: string | undefined): AckCall {
  if (error !== undefined) call.error = error;
  return call;
}

/** Reads either form of the body: `{ ids: [...] }` or the compact `{ groups: [...] }`. */
function callFromBody(body: unknown, tenant: string): AckCall {
  const elements = elementsIn(body);
  // A compact range names more than one item: its count is then only a floor.
  if (elements > MAX_ACK_IDS) throw tooLarge(elements, Array.isArray((body as { groups?: unknown }).groups));
  if (typeof body === 'object' && body !== null && 'groups' in body) {
    const compact = parse(compactAckBody, body, 'body');
    const count = compactSize(compact.groups);
    if (count > MAX_ACK_IDS) throw tooLarge(count);
    return withError(callFromCompact(compact.groups, compact.outcome ?? 'succeeded', tenant), compact.error);
  }
  const plain = parse(ackBody, body, 'body');
  if (plain.ids.length > MAX_ACK_IDS) throw tooLarge(plain.ids.length);
  return withError(callFromIds(plain.ids, plain.outcome ?? 'succeeded', tenant), plain.error);
}

/** Consumer route POST /v1/acks: its handlers, which app.ts mounts after the common middleware. */
export function ackHandlers(submit: SubmitAck): RequestHandler[] {
  return [
    requireScope('consume'),
    async (req, res) => {
      res.json(await submit(callFromBody(req.body, req.caller.tenant)));
    },
  ];
}
