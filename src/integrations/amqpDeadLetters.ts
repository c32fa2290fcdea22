/**
 * `rollcallDeadLetterConsumer`: records `failed` the items of messages RabbitMQ gave up on (past the
 * queue's `x-delivery-limit`, expired, pushed out by a length limit), which no consumer will see
 * again: without it their items stay pending and their batches never complete.
 */
import type { ConsumeMessage } from 'amqplib';

import type { RollcallClient } from '../client';
import { AckCoalescingOptions, sharedCoalescer } from './ackCoalescer';
import { DONE_HEADER, doneCopiesOf } from './amqpDoneCopies';
import { AckingChannel, headerOf, MessageHandling, MessageHandlingOptions, RollcallConsumeCallback, textHeaderOf, textOfHeaderValue } from './amqpMessages';
import { sharedCancelledBatches } from './cancelledBatches';
import { sharedTokenCheck } from './tokenCheck';

/**
 * The dead-letter reasons of a message RabbitMQ itself gave up on. The fourth, `rejected`, is a
 * consumer's choice: rollcallConsumer drops only messages it could not record (rollcall refused the
 * ack, or there is no item ID), which are kept for a replay.
 */
const GIVEN_UP: readonly DeadLetterReason[] = ['delivery_limit', 'expired', 'maxlen'];

/** The reasons RabbitMQ dead-letters a message for. */
export type DeadLetterReason = 'delivery_limit' | 'expired' | 'maxlen' | 'rejected';
const DEAD_LETTER_REASONS: ReadonlySet<string> = new Set<DeadLetterReason>(['delivery_limit', 'expired', 'maxlen', 'rejected']);

export interface RollcallDeadLetterOptions extends AckCoalescingOptions, MessageHandlingOptions {
  /**
   * The dead-letter reasons whose items are recorded `failed`. Default: `delivery_limit`, `expired`
   * and `maxlen`. Add `rejected` when your own consumers reject messages for good that they have not
   * recorded.
   */
  reasons?: readonly DeadLetterReason[];
}

interface Death {
  reason: string | undefined;
  queue: string | undefined;
}

/**
 * Why and where the message was last dead-lettered: `x-last-death-*` (RabbitMQ 3.13 on) names the
 * latest death whatever else the message carries; else `x-death`, one entry per queue and reason,
 * whose first is the latest where the broker moves an entry it counts again to the front (one that
 * did not would name an older death there: a message replayed, rejected, then past its delivery
 * limit again); else `x-first-death-*`, the same of a message dead-lettered once.
 */
function lastDeathOf(message: ConsumeMessage): Death {
  const lastReason = textHeaderOf(message, 'x-last-death-reason');
  if (lastReason !== undefined) return { reason: lastReason, queue: textHeaderOf(message, 'x-last-death-queue') };
  const deaths = headerOf(message, 'x-death');
  const latest: unknown = Array.isArray(deaths) ? deaths[0] : undefined;
  if (typeof latest === 'object' && latest !== null) {
    const entry = latest as Record<string, unknown>;
    return { reason: textOfHeaderValue(entry.reason), queue: textOfHeaderValue(entry.queue) };
  }
  return { reason: textHeaderOf(message, 'x-first-death-reason'), queue: textHeaderOf(message, 'x-first-death-queue') };
}

function reasonsOf(options: RollcallDeadLetterOptions): ReadonlySet<string> {
  const reasons: unknown = options.reasons ?? GIVEN_UP;
  // A misspelt reason ('delivery-limit') would pass every dead letter on, unrecorded, without a word.
  if (!Array.isArray(reasons) || reasons.length === 0 || !reasons.every((reason) => DEAD_LETTER_REASONS.has(reason as string)))
    throw new RangeError(`reasons must be a list of dead-letter reasons out of ${[...DEAD_LETTER_REASONS].join(', ')}, not ${JSON.stringify(reasons)}`);
  return new Set(reasons as string[]);
}

/**
 * A consume callback for a queue that receives dead letters: `channel.consume(deadLetterQueue,
 * rollcallDeadLetterConsumer(client, channel))`. For each message:
 * - dead-lettered for one of `options.reasons`: its item is acked `failed` (`dead-lettered by
 *   RabbitMQ (delivery_limit) from queue thumbnails`), then the message is acked. An item that
 *   already succeeded stays succeeded (a duplicate), one already failed keeps its reason (the
 *   worker's, recorded before its message's ack was lost), and a later replay's success still
 *   counts while the batch is open (a retry won);
 * - dead-lettered for another reason, or rollcall refuses the ack (`ack_rejected`), or it has no item
 *   ID (`missing_item_id`): nacked without requeue, so it goes on to this queue's own dead-letter
 *   exchange (a parking queue) if it has one, and is dropped if not;
 * - its batch is cancelled: acked (rollcall answers `batch_cancelled`);
 * - rollcall cannot be reached: held and sent again, as rollcallConsumer does, then requeued; the
 *   call refused (a `4xx`): rejected and requeued, a counted delivery, so give this queue an
 *   `x-delivery-limit` too.
 * Acks are coalesced with those of every consumer of this client in the process.
 */
export function rollcallDeadLetterConsumer(client: RollcallClient, channel: AckingChannel, options: RollcallDeadLetterOptions = {}): RollcallConsumeCallback {
  // No cancel check before each ack, as rollcallConsumer makes to skip a handler: there is no
  // handler here, and rollcall answers a cancelled batch's ack with batch_cancelled.
  const copies = doneCopiesOf(client, channel, options);
  const messages = new MessageHandling(channel, sharedCoalescer(client, options), sharedCancelledBatches(client), sharedTokenCheck(client), options, copies);
  const reasons = reasonsOf(options);
  return messages.callback(async (message) => {
    const death = lastDeathOf(message);
    const recorded = death.reason !== undefined && reasons.has(death.reason);
    // A done copy whatever its death says: one this consumer made itself (options.queue: its own
    // queue) carries no death headers, as a new message has none.
    if (!recorded && headerOf(message, DONE_HEADER) === undefined) return messages.settle(message, 'drop');
    const itemId = messages.itemIdOrDrop(message);
    if (itemId === undefined || (await messages.returnedForRefusedToken(message))) return;
    // A done copy that expired or was pushed out (options.queue of the work queue's consumers): its work was done.
    if (messages.isDone(message, itemId)) return messages.record(message, itemId, 'succeeded');
    if (!recorded) return messages.settle(message, 'drop'); // a mark this token did not make
    // The worker's own error says more than that RabbitMQ gave up on a message redelivered after it.
    if (await settledAlready(client, itemId)) return messages.settle(message, 'ack');
    const from = death.queue === undefined ? '' : ` from queue ${death.queue}`;
    return messages.record(message, itemId, 'failed', `dead-lettered by RabbitMQ (${death.reason})${from}`);
  });
}

/** How long the look-up before a record may take: past it the failure is recorded as if it had found nothing. */
const LOOKUP_TIMEOUT_MS = 2_000;

/**
 * Whether the item is recorded failed already, or its batch cancelled (nothing to record). Not when
 * rollcall cannot tell in time: recording the failure then says why (a refusal is parked and
 * reported, an outage holds and requeues the dead letter).
 */
async function settledAlready(client: RollcallClient, itemId: string): Promise<boolean> {
  try {
    const item = await client.item(itemId, { signal: AbortSignal.timeout(LOOKUP_TIMEOUT_MS) });
    return item.state === 'failed' || item.batchState === 'cancelled';
  } catch {
    return false;
  }
}
