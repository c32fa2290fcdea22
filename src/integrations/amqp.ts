/**
 * `import { rollcallConsumer } from 'rollcall/amqp'`: an amqplib `consume` callback that acks each
 * message's rollcall item, then the message. amqplib is an optional peer dependency, and this module
 * only uses its types: it works with the channel the application made (amqplib 0.10 or later).
 */
import type { ConsumeMessage } from 'amqplib';

import type { RollcallClient } from '../client';
import { AckCoalescingOptions, sharedCoalescer } from './ackCoalescer';
import { doneCopiesOf } from './amqpDoneCopies';
import { AckingChannel, headerOf, MessageHandling, MessageHandlingOptions, RollcallConsumeCallback } from './amqpMessages';
import { CancelCheckOptions, sharedCancelledBatches } from './cancelledBatches';
import { isHandedToChild } from './childBatch';
import { failureMessageOf } from './errors';
import { sharedTokenCheck } from './tokenCheck';

/** The consumer for dead letters: records the items of messages RabbitMQ gave up on. */
export { rollcallDeadLetterConsumer, type RollcallDeadLetterOptions } from './amqpDeadLetters';
export { DONE_HEADER } from './amqpDoneCopies';
export { type AckingChannel, ITEM_ID_HEADER, type RollcallConsumeCallback } from './amqpMessages';
/** What the integrations throw or report, with a stable `code`: `instanceof` it to tell them. */
export { type IntegrationErrorCode, RollcallIntegrationError } from './errors';
/** What a handler returns once it opened a child batch for its own item. */
export { type HandedToChild, handedToChild } from './childBatch';

/** Set by RabbitMQ quorum queues on a redelivery: how many times the message was returned before. */
export const DELIVERY_COUNT_HEADER = 'x-delivery-count';

export interface RollcallConsumerOptions extends AckCoalescingOptions, CancelCheckOptions, MessageHandlingOptions {
  /**
   * The `x-delivery-count` at which a failure is final (the API's contract): a failure on a delivery
   * whose count is below it is requeued, one at it is acked `failed`. The handler so runs at most
   * `maxDeliveries + 1` times. Set the queue's `x-delivery-limit` a few above it: a delivery cut
   * short (a crash, a closed channel) counts too, and past the limit RabbitMQ drops the message
   * before its failure is recorded (or dead-letters it: see rollcallDeadLetterConsumer). Default 3.
   */
  maxDeliveries?: number;
}

/**
 * Deliveries before this one: 0 on the first (quorum queues add the header only on redelivery). A
 * first delivery is not `redelivered`, whatever its header says: a message republished with the
 * headers of one consumed before carries that one's count, which is not this message's.
 */
export function previousDeliveries(message: ConsumeMessage): number {
  if (!message.fields.redelivered) return 0;
  const count = Number(headerOf(message, DELIVERY_COUNT_HEADER) ?? 0);
  return Number.isFinite(count) && count > 0 ? count : 0;
}

/**
 * Deliveries past `maxDeliveries` whose channel closed under a failing handler that are not taken
 * for its last: the docs' `x-delivery-limit` leaves three for deliveries cut short.
 */
const CLOSED_RUNS_BEYOND = 2;

/**
 * `options.maxDeliveries`, checked: a value no count reaches or passes as meant is refused when the
 * consumer is made. `Number(process.env.MAX_DELIVERIES)` with the variable unset is NaN, below
 * which no count is: every first failure was recorded as final, silently.
 */
function maxDeliveriesOf(options: RollcallConsumerOptions): number {
  const maxDeliveries = options.maxDeliveries ?? 3;
  // Infinity: every failure is requeued, and the queue's x-delivery-limit and dead-letter exchange decide.
  if (!(maxDeliveries === Infinity || (Number.isSafeInteger(maxDeliveries) && maxDeliveries >= 0)))
    throw new RangeError(`maxDeliveries must be a whole number ≥ 0 (or Infinity), not ${String(maxDeliveries)}`);
  return maxDeliveries;
}

/**
 * A consume callback around `handler`: `channel.consume(queue, rollcallConsumer(client, channel, handler))`
 * (with `noAck: false`, the default). For each message:
 * - rollcall refuses the token (an ack answered `401`/`403`, and `GET /v1/whoami` agrees): the
 *   message is held unrun until rollcall takes it (MessageHandling.returnedForRefusedToken);
 * - its batch is cancelled: the message is acked, the handler not run;
 * - the handler succeeds: rollcall is acked `succeeded`, then the message is acked; a handler that
 *   opened a child batch for the item returns `handedToChild()`: the message is acked, the item not
 *   (the child's outcome records it);
 * - the handler throws and the message's `x-delivery-count` is below `maxDeliveries`: the message is
 *   rejected and requeued;
 * - the handler throws on the delivery whose count is `maxDeliveries`: rollcall is acked `failed` with
 *   the error's message, then the message is acked.
 * rollcall is always told first: a consumer that dies between the two acks gets the message again,
 * and the repeat counts as a duplicate. Acks of every consumer and processor of this client in the
 * process are merged into few calls (sharedCoalescer).
 * Needs a quorum queue (`x-queue-type: quorum`), which counts deliveries; a classic queue does not,
 * and its failing messages would be requeued forever.
 * `drain()` on the callback waits for the messages already received, for a graceful stop.
 */
export function rollcallConsumer(
  client: RollcallClient,
  channel: AckingChannel,
  handler: (message: ConsumeMessage) => unknown,
  options: RollcallConsumerOptions = {},
): RollcallConsumeCallback {
  const maxDeliveries = maxDeliveriesOf(options);
  const copies = doneCopiesOf(client, channel, options);
  const messages = new MessageHandling(
    channel,
    sharedCoalescer(client, options),
    sharedCancelledBatches(client, options),
    sharedTokenCheck(client),
    options,
    copies,
  );
  return messages.callback(async (message) => {
    const itemId = messages.itemIdOrDrop(message);
    if (itemId === undefined || messages.ackedAsKnownCancelled(message, itemId)) return;
    // The token before asking about a cancel: a batch cancelled while its message was held is then still noticed.
    if ((await messages.returnedForRefusedToken(message)) || (await messages.ackedAsCancelled(message, itemId))) return;
    if (messages.closed) return; // RabbitMQ has it back: another consumer runs it
    if (messages.isDone(message, itemId)) return messages.record(message, itemId, 'succeeded'); // its work was done: see options.queue
    let returned: unknown;
    try {
      returned = await handler(message);
    } catch (thrown) {
      // A channel closed during the run (the connection dropped, which may be why it threw): RabbitMQ
      // has the message back and will deliver it again, so this was not its last delivery after all.
      // Unless its runs keep closing their channels past maxDeliveries (a handler that publishes to a
      // missing exchange on its own channel, say): that failure is the handler's, and is recorded.
      if (messages.closed && previousDeliveries(message) < maxDeliveries + CLOSED_RUNS_BEYOND) return;
      if (previousDeliveries(message) < maxDeliveries) return messages.settle(message, 'retry');
      return messages.record(message, itemId, 'failed', failureMessageOf(thrown));
    }
    if (isHandedToChild(returned)) return messages.settle(message, 'ack'); // the child's outcome records the item
    return messages.record(message, itemId, 'succeeded');
  });
}
