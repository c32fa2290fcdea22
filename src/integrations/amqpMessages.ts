/**
 * What rollcall/amqp's consume callbacks share: reading a message's item ID, telling rollcall, and
 * settling each message once. amqplib is only a type here.
 */
import { setMaxListeners } from 'node:events';

import type { ConsumeMessage } from 'amqplib';

import { unlessAborted } from '../client/abortable';
import { isTransient } from '../client/retry';
import { AckCoalescer, ItemOutcome, keepingProcessAlive, Rejected } from './ackCoalescer';
import type { CopyingChannel, DoneCopies } from './amqpDoneCopies';
import { CancelledBatches } from './cancelledBatches';
import { asError, RollcallIntegrationError } from './errors';
import { synchronousItemIdOf } from './itemIdOf';
import { TokenCheck } from './tokenCheck';

/** The header that carries a message's item ID (set by the producer). */
export const ITEM_ID_HEADER = 'x-rollcall-item-id';

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
  /**
   * amqplib's `close` event, where the channel has one: the messages held for a refused token then
   * go (RabbitMQ has taken them back), unrun.
   */
  once?(event: 'close', listener: () => void): unknown;
}

/** What is told when a channel closes. */
interface ChannelCloseWatcher {
  channelClosed(): void;
}

/**
 * Who to tell when each channel closes: one listener a channel, however many consumers share it.
 * Held weakly: a long-lived channel on which consumers come and go (a consume per job kind, a
 * consumer made again after each cancel) would otherwise keep every consumer it ever had.
 */
const onClose = new WeakMap<AckingChannel, Set<WeakRef<ChannelCloseWatcher>>>();

function whenClosed(channel: AckingChannel, watcher: ChannelCloseWatcher): void {
  if (typeof channel.once !== 'function') return;
  let watchers = onClose.get(channel);
  if (!watchers) {
    const all = new Set<WeakRef<ChannelCloseWatcher>>();
    try {
      channel.once('close', () => all.forEach((ref) => ref.deref()?.channelClosed()));
    } catch {
      return; // not an event emitter after all: its held messages wait for their hold's end
    }
    onClose.set(channel, (watchers = all));
  }
  for (const ref of watchers) if (!ref.deref()) watchers.delete(ref); // the consumers gone since
  watchers.add(new WeakRef(watcher));
}

/** The options both consume callbacks take about messages and what goes wrong with them. */
export interface MessageHandlingOptions {
  /**
   * Where a message's item ID is. Default: the header `x-rollcall-item-id`. A message for which it
   * throws goes where a message without an ID goes (nacked without requeue; onError gets the error).
   */
  itemIdOf?: (message: ConsumeMessage) => string | undefined;
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
   * The queue this callback consumes, on a channel with publisher confirms
   * (`connection.createConfirmChannel()`: the consumer's own, or `copyChannel`). With it, a message
   * whose handler succeeded but whose ack rollcall did not take (out of reach past `retryForMs`) is
   * not returned: a copy marked done (header `x-rollcall-done`, made with the client's token) is
   * published to this queue, and the message acked once the broker confirms the copy. Whoever takes
   * the copy only tells rollcall, without running the handler again, and the copy starts with no
   * deliveries. Without it, such a message is returned with `nack`, which before RabbitMQ 4.3 counts
   * a delivery: a long outage takes it past the queue's `x-delivery-limit`, and
   * rollcallDeadLetterConsumer then records the done work as failed. A copy that no queue takes (a
   * misnamed queue), that the broker refuses or does not confirm within `copyConfirmTimeoutMs` is
   * reported (`copy_failed`), and the message is returned as without this option.
   */
  queue?: string;
  /**
   * The channel, with publisher confirms, that done copies (`queue`) are published on. Default: the
   * consumer's own. RabbitMQ advises publishing on a connection of its own: under a memory or disk
   * alarm the broker stops reading a connection that publishes, the consumer's acks with it.
   */
  copyChannel?: CopyingChannel;
  /**
   * How long a done copy's publisher confirm is waited for (ms; default 30,000). Past it the message
   * is returned as without `queue`: a broker under a resource alarm stops reading the publishing
   * connection, and its confirm may never come. A copy the broker took but confirmed late is then
   * in the queue beside the returned message: the work runs again, and the item is still counted once.
   */
  copyConfirmTimeoutMs?: number;
  /**
   * Called when RabbitMQ cancels the consumer (its queue was deleted, or the queue's node went away
   * for good): no more messages will come to this callback, and amqplib says so only by calling it
   * with `null`. Consume again, or stop the process so that it is restarted. Default: ignore.
   */
  onCancelled?: () => void;
}

/** What the consume callbacks return: amqplib's consume callback, and a way to let its messages finish. */
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
 * How a message leaves a consumer: acked; returned as a failed delivery (`retry`); returned without
 * counting one from RabbitMQ 4.3 on (`requeue`); nacked without requeue, so dead-lettered where its
 * queue has a dead-letter exchange (`drop`).
 */
export type Settlement = 'ack' | 'retry' | 'requeue' | 'drop';

/**
 * Calls a user's hook: what it throws must not stop a message being settled, nor may an async hook's
 * rejection end the process as an unhandled one (a `=> void` type takes an async function too).
 */
export function callQuietly(hook: () => unknown): void {
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

export function headerOf(message: ConsumeMessage, name: string): unknown {
  return (message.properties.headers as Record<string, unknown> | undefined)?.[name];
}

/** A header's text: a header sent as a byte array (AMQP's `x`) comes from amqplib as a Buffer. */
export function textHeaderOf(message: ConsumeMessage, name: string): string | undefined {
  return textOfHeaderValue(headerOf(message, name));
}

export function textOfHeaderValue(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  return Buffer.isBuffer(value) ? value.toString('utf8') : undefined;
}

function defaultItemIdOf(message: ConsumeMessage): string | undefined {
  return textHeaderOf(message, ITEM_ID_HEADER);
}

/**
 * The longest a message is held unrun while rollcall refuses the token (or `retryForMs`, when
 * shorter): RabbitMQ's `consumer_timeout` counts the hold, and the run and its ack come after it.
 */
const MAX_TOKEN_HOLD_MS = 5 * 60_000;

/**
 * What `drain()` aborts to send the messages held at the time back to the queue. Every held
 * message listens to it (and stops listening at each look-up's answer: a race against one promise
 * kept until a drain would keep every answer a long refusal gave), so the listener warning is off.
 */
function holding(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}

/**
 * What the consume callbacks share for each message: its item ID, telling rollcall of its outcome,
 * and settling it once.
 */
export class MessageHandling {
  private readonly itemIdOf: (message: ConsumeMessage) => string | undefined;
  /** Messages settled here: each is settled once, and one that an unforeseen error left is settled too. */
  private readonly settledMessages = new WeakSet<ConsumeMessage>();
  /**
   * Aborted (and replaced: releaseHeld) by `drain()` and when the channel closes: the messages held
   * then for a refused token go back to the queue. A message reads it in the turn it comes in
   * (returnedForRefusedToken comes first), so a drain releases every message it was given before.
   */
  private holding = holding();
  /** Set when the channel closes: RabbitMQ has its unsettled messages back, for another consumer to run. */
  private isChannelClosed = false;

  constructor(
    private readonly channel: AckingChannel,
    private readonly acks: AckCoalescer,
    private readonly cancelled: CancelledBatches,
    private readonly tokens: TokenCheck,
    private readonly options: MessageHandlingOptions,
    private readonly doneCopies: DoneCopies,
  ) {
    this.itemIdOf = options.itemIdOf ? synchronousItemIdOf(options.itemIdOf) : defaultItemIdOf;
    // A held message must not run once RabbitMQ has taken it back (for another consumer to run).
    whenClosed(channel, this);
  }

  /** Told by the channel's `close`, while this consumer is in use. */
  channelClosed(): void {
    this.isChannelClosed = true;
    this.releaseHeld();
  }

  /**
   * Whether the message's channel has closed (a dropped connection, say) while it waited to run (for
   * a cancel look-up, which takes up to the client's timeoutMs when rollcall is slow): RabbitMQ gives
   * it to another consumer, so running it here too would do its work twice. Without a `close` event
   * on the channel this never turns true.
   */
  get closed(): boolean {
    return this.isChannelClosed;
  }

  report(error: Error, message: ConsumeMessage): void {
    callQuietly(() => this.options.onError?.(error, message));
  }

  /**
   * The message's item ID, or undefined once a message without one is settled (dropped, so
   * dead-lettered where its queue has a dead-letter exchange) and reported.
   */
  itemIdOrDrop(message: ConsumeMessage): string | undefined {
    let itemId: unknown;
    try {
      itemId = this.itemIdOf(message);
    } catch (thrown) {
      this.report(asError(thrown), message); // a message none can read goes where a message without an ID goes
      this.settle(message, 'drop');
      return undefined;
    }
    if (typeof itemId === 'string' && itemId) return itemId;
    // Not only undefined: an itemIdOf that reads a numeric header gives a number, which no item ID is.
    this.report(new RollcallIntegrationError('missing_item_id', `message ${message.fields.deliveryTag} has no ${ITEM_ID_HEADER} header`), message);
    this.settle(message, 'drop');
    return undefined;
  }

  /** Whether the message is a copy of one whose work is done (`options.queue`, here or in another consumer with the token): then rollcall is only told. */
  isDone(message: ConsumeMessage, itemId: string): boolean {
    return this.doneCopies.isDone(message, itemId);
  }

  /** Whether the message was replaced by a copy marked done, and acked: false when there is no `options.queue`, or the copy failed (reported). */
  private async replacedByDoneCopy(message: ConsumeMessage, itemId: string): Promise<boolean> {
    if (!this.doneCopies.publishing || this.closed) return false;
    try {
      await this.doneCopies.publish(message, itemId);
    } catch (error) {
      this.report(
        new RollcallIntegrationError('copy_failed', `the done copy of message ${message.fields.deliveryTag} was not kept: ${asError(error).message}`, {
          cause: error,
        }),
        message,
      );
      return false;
    }
    this.settle(message, 'ack');
    return true;
  }

  /** Whether the process already knows the item's batch is cancelled (asking nothing): then the message is acked. */
  ackedAsKnownCancelled(message: ConsumeMessage, itemId: string): boolean {
    if (!this.cancelled.knownCancelled(itemId)) return false;
    this.settle(message, 'ack');
    return true;
  }

  /** Whether the item's batch is cancelled: then the message is acked, nothing else done with it. */
  async ackedAsCancelled(message: ConsumeMessage, itemId: string): Promise<boolean> {
    if (!(await this.cancelled.isCancelled(itemId))) return false;
    this.settle(message, 'ack');
    return true;
  }

  /**
   * Sends the messages held now for a refused token back to the queue. Those that come later are
   * held again: a consumer drained without a cancel, or a channel that goes on delivering after
   * its `close`, would otherwise get each back at once, over and over.
   */
  private releaseHeld(): void {
    this.holding.abort();
    this.holding = holding();
  }

  /**
   * Whether the message went back to the queue unrun because rollcall refuses the token (see
   * TokenCheck). While an ack's `401`/`403` makes the token suspect, the message waits for
   * rollcall's word on it, and is held, unacked and unrun, while that word is a refusal (looked up
   * again every TOKEN_RECHECK_MS): its work would be done, with no ack rollcall would take, and done
   * again at each redelivery. Held, it keeps its prefetch place, so this consumer takes no more and
   * the others take the queue's messages, as in an outage. It runs once rollcall takes the token;
   * at the first look-up after MAX_TOKEN_HOLD_MS (or `retryForMs`), or when `drain()` is called, it
   * goes back to the queue as a run that did not fail (`requeue`), to come back to whichever
   * consumer it reaches; when the channel closes, RabbitMQ has it back already.
   */
  async returnedForRefusedToken(message: ConsumeMessage): Promise<boolean> {
    if (!this.tokens.suspect) return false;
    const holdUntil = performance.now() + Math.min(MAX_TOKEN_HOLD_MS, this.acks.retryForMs);
    const { signal } = this.holding;
    try {
      for (;;) {
        if ((await unlessAborted(this.tokens.verdict(), signal)) === null) return false; // taken: run it
        if (performance.now() >= holdUntil) break;
      }
    } catch {
      // drain() was called, or the channel closed: the message goes back now
    }
    this.settle(message, 'requeue');
    return true;
  }

  /**
   * A failed run is returned with basic.reject, which counts a delivery on every RabbitMQ version; a
   * run rollcall could not hear of is returned with basic.nack, which from RabbitMQ 4.3 on does not
   * count one (the handler did not fail), and before 4.3 counts one as every return did.
   * After a dropped connection the channel is closed and acking throws; RabbitMQ redelivers the message.
   */
  settle(message: ConsumeMessage, how: Settlement): void {
    if (this.settledMessages.has(message)) return;
    this.settledMessages.add(message);
    const notSettled = (error: unknown) => {
      if (closedChannel(error)) return; // nothing to do: the broker already took the message back
      this.report(
        new RollcallIntegrationError('settle_failed', `message ${message.fields.deliveryTag} could not be settled (${how}): ${asError(error).message}`, {
          cause: error,
        }),
        message,
      );
    };
    const { channel } = this;
    try {
      // A wrapper's ack may be async (the type takes one): its rejection must not go unhandled.
      const result: unknown =
        how === 'ack' ? channel.ack(message) : how === 'retry' && channel.reject ? channel.reject(message, true) : channel.nack(message, false, how !== 'drop');
      if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function') Promise.resolve(result).catch(notSettled);
    } catch (error) {
      notSettled(error);
    }
  }

  /**
   * Tells rollcall, then settles the message. A rollcall that cannot be told means a requeue: after
   * an outage (the retries spent) one that counts no delivery, but after an answer no retry changes
   * (a `4xx`: a token refused, a wrong baseUrl) a failed delivery, so the queue's delivery limit ends
   * the reruns where RabbitMQ 4.3 on would otherwise redeliver it at once, forever.
   */
  async record(message: ConsumeMessage, itemId: string, outcome: ItemOutcome, error?: string): Promise<void> {
    let rejected: Rejected;
    try {
      rejected = await this.acks.ack(itemId, outcome, error);
    } catch (ackError) {
      this.tokens.learn(ackError); // the messages after this one wait for rollcall's word on the token
      this.report(asError(ackError), message);
      // Done work is kept as done through an outage, not returned to count a delivery (and to be done
      // again): see `options.queue`. Not after a refusal: a copy refused again would be copied again,
      // without end, where a counted return lets the queue's delivery limit end it.
      if (outcome === 'succeeded' && isTransient(ackError) && (await this.replacedByDoneCopy(message, itemId))) return;
      return this.settle(message, isTransient(ackError) ? 'requeue' : 'retry');
    }
    if (rejected === null || rejected === 'batch_cancelled') {
      if (rejected !== null) this.cancelled.learnCancelled(itemId);
      return this.settle(message, 'ack');
    }
    // Not acked: dead-lettered where the queue has a dead-letter exchange, for a replay once what
    // made rollcall refuse it is fixed (a token of another tenant sees every batch as unknown_batch).
    this.report(new RollcallIntegrationError('ack_rejected', `rollcall rejected item ${itemId}: ${rejected}`), message);
    this.settle(message, 'drop');
  }

  /**
   * amqplib's consume callback around `consume`, with `drain()`. Every message is settled once: one
   * an unforeseen error left is returned as a failed delivery, so it cannot hold its prefetch place
   * for good, and the queue's delivery limit ends its reruns if the error comes back each time.
   */
  callback(consume: (message: ConsumeMessage) => Promise<void>): RollcallConsumeCallback {
    const unsettled = new Set<Promise<void>>();
    const callback = (message: ConsumeMessage | null): void => {
      if (message === null) return callQuietly(() => this.options.onCancelled?.()); // the broker cancelled the consumer
      const settled: Promise<void> = consume(message)
        .catch((error: unknown) => {
          this.report(asError(error), message);
          this.settle(message, 'retry');
        })
        .finally(() => unsettled.delete(settled));
      unsettled.add(settled);
    };
    const drain = async (): Promise<void> => {
      this.releaseHeld(); // a graceful stop must not wait out a refused token
      while (unsettled.size > 0) await keepingProcessAlive(Promise.all([...unsettled]));
    };
    return Object.assign(callback, { drain });
  }
}
