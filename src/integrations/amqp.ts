/**
 * `import { rollcallConsumer } from 'rollcall/amqp'`: an amqplib `consume` callback that acks each
 * message's rollcall item, then the message. amqplib is an optional peer dependency, and this module
 * only uses its types: it works with the channel the application made (amqplib 0.10 or later).
 */
import type { ConsumeMessage } from 'amqplib';

import type { RollcallClient } from '../client';
import { isTransient } from '../client/retry';
import { AckCoalescingOptions, keepingProcessAlive, Rejected, sharedCoalescer } from './ackCoalescer';
import { CancelCheckOptions, sharedCancelledBatches } from './cancelledBatches';
import { asError, failureMessageOf, RollcallIntegrationError } from './errors';

/** What the integrations throw or report, with a stable `code`: `instanceof` it to tell them. */
export { type IntegrationErrorCode, RollcallIntegrationError } from './errors';

/** The header that carries a message's item ID (set by the producer). */
export const ITEM_ID_HEADER = 'x-rollcall-item-id';
/** Set by RabbitMQ quorum queues on a redelivery: how many times the message was returned before. */
export const DELIVERY_COUNT_HEADER = 'x-delivery-count';

/**
 * The part of an amqplib Channel used here. `reject` is optional: a channel without one (such as
 * amqp-connection-manager's ChannelWrapper) returns failed runs with `nack`, which from RabbitMQ 4.3
 * on does not count a delivery. Prefer the raw channel of each of the wrapper's setups: the wrapper
 * settles on whatever channel is current, so after a reconnect a late ack could hit another message.
 */
export interface AckingChannel {
  ack(message: ConsumeMessage): void;
  nack(message: ConsumeMessage, allUpTo?: boolean, requeue?: boolean): void;
  reject?(message: ConsumeMessage, requeue?: boolean): void;
}

export interface RollcallConsumerOptions extends AckCoalescingOptions, CancelCheckOptions {
  /**
   * Where a message's item ID is. Default: the header `x-rollcall-item-id`. A message for which it
   * throws goes where a message without an ID goes (nacked without requeue; onError gets the error).
   */
  itemIdOf?: (message: ConsumeMessage) => string | undefined;
  /**
   * The `x-delivery-count` at which a failure is final (the API's contract): a failure on a delivery
   * whose count is below it is requeued, one at it is acked `failed`. The handler so runs at most
   * `maxDeliveries + 1` times. Set the queue's `x-delivery-limit` a few above it: a delivery cut
   * short (a crash, a closed channel) counts too, and past the limit RabbitMQ drops the message
   * before its failure is recorded. Default 3.
   */
  maxDeliveries?: number;
  /**
   * Told what a consume callback cannot throw to anyone: an ack rollcall rejected (`ack_rejected`;
   * the message is nacked without requeue, so it is dead-lettered where the queue has a dead-letter
   * exchange: a rerun would be refused again, but a replay after a fix, such as the right tenant's
   * token, is not), an ack call that failed after its retries or was
   * refused with a `4xx` (the message is requeued: see `record`), a message without an item ID (`missing_item_id`; nacked without requeue,
   * so it is dead-lettered where the queue has a dead-letter exchange), a message the channel could
   * not ack or return for another reason than being closed (`settle_failed`: it stays unacked until
   * the channel closes), and anything else that went wrong with a message (it is then returned as a
   * failed delivery). Default: ignore. What it throws,
   * or its promise rejects with, is ignored: the message is settled all the same.
   */
  onError?: (error: Error, message: ConsumeMessage) => void;
  /**
   * Called when RabbitMQ cancels the consumer (its queue was deleted, or the queue's node went away
   * for good): no more messages will come to this callback, and amqplib says so only by calling it
   * with `null`. Consume again, or stop the process so that it is restarted. Default: ignore.
   */
  onCancelled?: () => void;
}

/**
 * Calls a user's hook: what it throws must not stop a message being settled, nor may an async hook's
 * rejection end the process as an unhandled one (a `=> void` type takes an async function too).
 */
function callQuietly(hook: () => unknown): void {
  try {
    const result = hook();
    if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function') Promise.resolve(result).catch(() => undefined);
  } catch {
    // ignored, as documented
  }
}

/** amqplib's refusal to use a channel that is closed or closing (after a dropped connection, say). */
function closedChannel(error: unknown): boolean {
  return (error as { name?: unknown } | null)?.name === 'IllegalOperationError';
}

function headerOf(message: ConsumeMessage, name: string): unknown {
  return (message.properties.headers as Record<string, unknown> | undefined)?.[name];
}

function defaultItemIdOf(message: ConsumeMessage): string | undefined {
  const value = headerOf(message, ITEM_ID_HEADER);
  if (typeof value === 'string') return value;
  return Buffer.isBuffer(value) ? value.toString('utf8') : undefined;
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

/** What rollcallConsumer returns: amqplib's consume callback, and a way to let its messages finish. */
export interface RollcallConsumeCallback {
  (message: ConsumeMessage | null): void;
  /**
   * Resolves once every message this callback has been given is settled (rollcall told, the message
   * acked or returned). For a graceful stop: `channel.cancel(consumerTag)`, then `drain()`, then
   * close the channel; closing at once returns the unsettled messages to the queue, to be run again.
   */
  drain(): Promise<void>;
}

/**
 * A consume callback around `handler`: `channel.consume(queue, rollcallConsumer(client, channel, handler))`
 * (with `noAck: false`, the default). For each message:
 * - its batch is cancelled: the message is acked, the handler not run;
 * - the handler succeeds: rollcall is acked `succeeded`, then the message is acked;
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
  const acks = sharedCoalescer(client, options);
  const cancelled = sharedCancelledBatches(client, options);
  const itemIdOf = options.itemIdOf ?? defaultItemIdOf;
  const maxDeliveries = maxDeliveriesOf(options);
  const report = (error: Error, message: ConsumeMessage) => callQuietly(() => options.onError?.(error, message));
  /** Messages settled here: each is settled once, and one that an unforeseen error left is settled too. */
  const settledMessages = new WeakSet<ConsumeMessage>();

  /**
   * How a message leaves this consumer. A failed run is returned with basic.reject, which counts a
   * delivery on every RabbitMQ version; a run rollcall could not hear of is returned with
   * basic.nack, which from RabbitMQ 4.3 on does not count one (the handler did not fail), and
   * before 4.3 counts one as every return did.
   * After a dropped connection the channel is closed and acking throws; RabbitMQ redelivers the message.
   */
  const settleMessage = (message: ConsumeMessage, how: 'ack' | 'retry' | 'requeue' | 'drop') => {
    if (settledMessages.has(message)) return;
    settledMessages.add(message);
    const notSettled = (error: unknown) => {
      if (closedChannel(error)) return; // nothing to do: the broker already took the message back
      report(
        new RollcallIntegrationError('settle_failed', `message ${message.fields.deliveryTag} could not be settled (${how}): ${asError(error).message}`, {
          cause: error,
        }),
        message,
      );
    };
    try {
      // A wrapper's ack may be async (the type takes one): its rejection must not go unhandled.
      const result: unknown =
        how === 'ack' ? channel.ack(message) : how === 'retry' && channel.reject ? channel.reject(message, true) : channel.nack(message, false, how !== 'drop');
      if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function') Promise.resolve(result).catch(notSettled);
    } catch (error) {
      notSettled(error);
    }
  };

  /**
   * Tells rollcall, then settles the message. A rollcall that cannot be told means a requeue: after
   * an outage (the retries spent) one that counts no delivery, but after an answer no retry changes
   * (a `4xx`: a token refused, a wrong baseUrl) a failed delivery, so the queue's delivery limit ends
   * the reruns where RabbitMQ 4.3 on would otherwise redeliver it at once, forever.
   */
  const record = async (message: ConsumeMessage, itemId: string, outcome: 'succeeded' | 'failed', error?: string) => {
    let rejected: Rejected;
    try {
      rejected = await acks.ack(itemId, outcome, error);
    } catch (ackError) {
      report(asError(ackError), message);
      return settleMessage(message, isTransient(ackError) ? 'requeue' : 'retry');
    }
    if (rejected === null || rejected === 'batch_cancelled') {
      if (rejected !== null) cancelled.learnCancelled(itemId);
      return settleMessage(message, 'ack');
    }
    // Not acked: dead-lettered where the queue has a dead-letter exchange, for a replay once what
    // made rollcall refuse it is fixed (a token of another tenant sees every batch as unknown_batch).
    report(new RollcallIntegrationError('ack_rejected', `rollcall rejected item ${itemId}: ${rejected}`), message);
    settleMessage(message, 'drop');
  };

  const consume = async (message: ConsumeMessage) => {
    let itemId: string | undefined;
    try {
      itemId = itemIdOf(message);
    } catch (thrown) {
      report(asError(thrown), message); // a message none can read goes where a message without an ID goes
      return settleMessage(message, 'drop');
    }
    if (typeof itemId !== 'string' || !itemId) {
      // Not only undefined: an itemIdOf that reads a numeric header gives a number, which no item ID is.
      report(new RollcallIntegrationError('missing_item_id', `message ${message.fields.deliveryTag} has no ${ITEM_ID_HEADER} header`), message);
      return settleMessage(message, 'drop');
    }
    if (await cancelled.isCancelled(itemId)) return settleMessage(message, 'ack');
    try {
      await handler(message);
    } catch (thrown) {
      if (previousDeliveries(message) < maxDeliveries) return settleMessage(message, 'retry');
      return record(message, itemId, 'failed', failureMessageOf(thrown));
    }
    return record(message, itemId, 'succeeded');
  };

  const unsettled = new Set<Promise<void>>();
  const callback = (message: ConsumeMessage | null): void => {
    if (message === null) return callQuietly(() => options.onCancelled?.()); // the broker cancelled the consumer
    const settled: Promise<void> = consume(message)
      .catch((error: unknown) => {
        // Unforeseen: the message must not hold its prefetch place for good. A failed delivery, so
        // the queue's delivery limit ends its reruns if the error comes back each time.
        report(asError(error), message);
        settleMessage(message, 'retry');
      })
      .finally(() => unsettled.delete(settled));
    unsettled.add(settled);
  };
  const drain = async (): Promise<void> => {
    while (unsettled.size > 0) await keepingProcessAlive(Promise.all([...unsettled]));
  };
  return Object.assign(callback, { drain });
}
