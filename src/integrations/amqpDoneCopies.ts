/**
 * A success rollcall could not be told of, kept on the message itself. Returned with `nack` (as a
 * consumer without `options.queue` does), such a message counts a delivery before RabbitMQ 4.3; an
 * outage longer than a few `retryForMs` took it past the queue's `x-delivery-limit`, and
 * rollcallDeadLetterConsumer then recorded work that was done as failed. A copy published to the
 * queue with a mark (DONE_HEADER) instead starts with no deliveries on any version, and whoever
 * takes it only tells rollcall, without running the work again. amqplib is only a type here.
 */
import { timingSafeEqual } from 'node:crypto';

import type { ConsumeMessage, Message, Options } from 'amqplib';

import type { RollcallClient } from '../client';
import { textHeaderOf } from './amqpMessages';

/** The header of a copy whose work is done: the item's mark (RollcallClient.markOf), made with the consumer's token. */
export const DONE_HEADER = 'x-rollcall-done';

/**
 * Headers a copy must not carry over: those the broker sets on a delivery or a dead letter (a new
 * message has none of its own yet), and the sender-selected destinations `CC` and `BCC`, which
 * would route the copy to other queues too (the copy goes to `options.queue` alone).
 */
const NOT_COPIED = [
  'x-delivery-count',
  'x-death',
  'x-first-death-reason',
  'x-first-death-queue',
  'x-first-death-exchange',
  'x-last-death-reason',
  'x-last-death-queue',
  'x-last-death-exchange',
  'CC',
  'BCC',
];

/**
 * How long a copy's confirm is waited for by default (`copyConfirmTimeoutMs`). amqplib fails the confirms under way when the channel
 * closes, but not every version every one of them (before 1.0.5 its close stopped at an entry of
 * a publish made without a callback), and a broker under a resource alarm stops reading the
 * connection: the message then goes back as without a copy, and `drain()` does not wait for ever.
 */
const COPY_CONFIRM_TIMEOUT_MS = 30_000;

/** The longest `copyConfirmTimeoutMs` a timer takes (2^31 - 1 ms, about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The part of an amqplib ConfirmChannel a copy is published with: publisher confirms say the broker
 * has it before the original is acked, and `mandatory` with the `return` event says it reached a
 * queue (a misnamed `options.queue` would otherwise drop every copy, and with it the success).
 */
export interface CopyingChannel {
  sendToQueue(queue: string, content: Buffer, options: Options.Publish, callback: (error: unknown) => void): unknown;
  waitForConfirms(): Promise<void>;
  on(event: 'return', listener: (message: Message) => void): unknown;
}

export function isCopyingChannel(channel: object): channel is CopyingChannel {
  const methods = channel as Record<keyof CopyingChannel, unknown>;
  return typeof methods.sendToQueue === 'function' && typeof methods.waitForConfirms === 'function' && typeof methods.on === 'function';
}

/** The mark of a done copy of `itemId`'s message, as `client`'s token makes it. */
export function doneMarkOf(client: RollcallClient, itemId: string): string {
  return client.markOf(`rollcall done\u0000${itemId}`);
}

/** Per channel, what waits for a copy's return, by its mark: one `return` listener a channel. */
const RETURNS = new WeakMap<CopyingChannel, Map<string, Set<() => void>>>();

function returnsOf(channel: CopyingChannel): Map<string, Set<() => void>> {
  let waiting = RETURNS.get(channel);
  if (!waiting) {
    const all = new Map<string, Set<() => void>>();
    channel.on('return', (message) => {
      const mark = textHeaderOf(message as ConsumeMessage, DONE_HEADER);
      if (mark !== undefined) all.get(mark)?.forEach((returned) => returned());
    });
    RETURNS.set(channel, (waiting = all));
  }
  return waiting;
}

function sameText(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

/**
 * Knows the copies of messages whose work is done (any consumer with the token does), and publishes
 * them to the queue a message came from where it is given one (`options.queue`).
 */
export class DoneCopies {
  constructor(
    private readonly client: RollcallClient,
    private readonly target?: { channel: CopyingChannel; queue: string; confirmTimeoutMs: number },
  ) {}

  /** Whether copies are published (`options.queue` given). */
  get publishing(): boolean {
    return this.target !== undefined;
  }

  /** Whether the message is a copy of one whose work for `itemId` was done: its mark is the one this client's token makes. */
  isDone(message: ConsumeMessage, itemId: string): boolean {
    const mark = textHeaderOf(message, DONE_HEADER);
    return mark !== undefined && sameText(mark, doneMarkOf(this.client, itemId));
  }

  /**
   * Publishes the message again to the queue, marked done, and resolves once the broker has it in
   * the queue (confirmed, not returned); rejects otherwise, and the caller returns the original.
   */
  publish(message: ConsumeMessage, itemId: string): Promise<void> {
    if (!this.target) return Promise.reject(new Error('no options.queue to publish the copy to'));
    const { channel, queue, confirmTimeoutMs } = this.target;
    const mark = doneMarkOf(this.client, itemId);
    const headers: Record<string, unknown> = { ...(message.properties.headers as Record<string, unknown> | undefined), [DONE_HEADER]: mark };
    for (const name of NOT_COPIED) delete headers[name];
    // userId must name the publishing connection's user, which this one may not be; clusterId is not sent.
    // eslint-disable-next-line @typescript-eslint/no-unused-vars
    const { userId, clusterId, headers: _original, ...properties } = message.properties as ConsumeMessage['properties'] & { clusterId?: unknown };
    const waiting = returnsOf(channel);
    const waiters = waiting.get(mark) ?? new Set<() => void>();
    waiting.set(mark, waiters);
    let returned = false;
    const onReturn = () => (returned = true);
    waiters.add(onReturn);
    const forget = () => {
      waiters.delete(onReturn);
      if (waiters.size === 0 && waiting.get(mark) === waiters) waiting.delete(mark);
    };
    return new Promise<void>((resolve, reject) => {
      const unconfirmed = setTimeout(() => {
        forget();
        reject(new Error(`the broker did not confirm the copy within ${confirmTimeoutMs / 1000} s`));
      }, confirmTimeoutMs).unref();
      try {
        channel.sendToQueue(queue, message.content, { ...(properties as Options.Publish), headers, mandatory: true }, (error) => {
          clearTimeout(unconfirmed);
          forget();
          // The broker sends a copy's return before its confirm.
          if (error) reject(error instanceof Error ? error : new Error(`the broker refused the copy: ${String(error)}`));
          else if (returned) reject(new Error(`no queue named ${JSON.stringify(queue)} took the copy (is options.queue the queue this consumer consumes?)`));
          else resolve();
        });
      } catch (error) {
        clearTimeout(unconfirmed);
        forget();
        reject(error);
      }
    });
  }
}

/**
 * The done copies of a consumer, publishing where `options.queue` asks, on `options.copyChannel` or
 * else the consumer's own: a channel without publisher confirms is then refused when the consumer is made.
 */
export function doneCopiesOf(
  client: RollcallClient,
  consuming: object,
  options: { queue?: string; copyChannel?: object; copyConfirmTimeoutMs?: number },
): DoneCopies {
  const { queue, copyConfirmTimeoutMs: confirmTimeoutMs = COPY_CONFIRM_TIMEOUT_MS } = options;
  // A timer past 2^31 - 1 ms, or of NaN, fires at once: every copy would fail.
  if (!(Number.isFinite(confirmTimeoutMs) && confirmTimeoutMs >= 1 && confirmTimeoutMs <= MAX_TIMER_MS))
    throw new RangeError(`copyConfirmTimeoutMs must be a number of ms from 1 to ${MAX_TIMER_MS}, not ${String(confirmTimeoutMs)}`);
  const channel = options.copyChannel ?? consuming;
  if (queue === undefined) return new DoneCopies(client);
  if (typeof queue !== 'string' || queue === '')
    throw new RangeError(`queue must be the name of the queue this consumer consumes, not ${JSON.stringify(queue)}`);
  if (!isCopyingChannel(channel))
    throw new RangeError(
      'options.queue needs a channel with publisher confirms (amqplib: connection.createConfirmChannel()), to know a copy is kept before the original is acked',
    );
  return new DoneCopies(client, { channel, queue, confirmTimeoutMs });
}
