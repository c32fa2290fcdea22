/**
 * A typed client for rollcall's HTTP API: `import { RollcallClient } from 'rollcall/client'`.
 * No dependencies beyond Node's own http module.
 */

import { createHmac } from 'node:crypto';

import type { AckResult, BatchView as Batch, ItemStatus, Rejection, Whoami } from '../contract/responses';
import { toExactText } from '../contract/text';
import { type BatchOutcome, type BatchState, HELD_BATCHES_HEADER, MAX_ACK_IDS } from '../contract/vocabulary';
import { linkedSignal, pause, timeLimitError, unlessAborted } from './abortable';
import { heldBatchIdsOf, retryAfterMs, RollcallApiError } from './apiError';
import { ANSWER_TOO_LARGE, type HttpAnswer, type HttpRequest, type HttpSend, httpSend, type HttpSendOptions, MAX_ANSWER_CHARS } from './httpSend';
import { isTimeLimit, isTransient, retryDelayMs, type RetryPolicy, retryPolicyOf } from './retry';

export type { AckResult, Batch, BatchOutcome, BatchState, HttpAnswer, HttpRequest, HttpSend, HttpSendOptions, ItemStatus, Rejection, RetryPolicy, Whoami };
export { ANSWER_TOO_LARGE, httpSend, MAX_ANSWER_CHARS, retryAfterMs, RollcallApiError };

/** One kept failure reason (GET /v1/batches/:batchId/failures). */
export interface FailureReason {
  id: string;
  error: string;
  failedAt: string;
}

export interface FailurePage {
  failures: FailureReason[];
  nextCursor: string | null;
  /** Failures whose reason was not kept: the batch already held FAILURE_REASONS_PER_BATCH reasons. */
  dropped: number;
}

export interface AckOptions {
  outcome?: 'succeeded' | 'failed';
  /** Why the items failed (≤ 1,000 characters); only with `outcome: 'failed'`. */
  error?: string;
}

export interface Group {
  id: string;
  size: number;
}

export interface AddedItems {
  batchId: string;
  total: number;
  groups: Group[];
  /** Every item ID of these groups, made one at a time: millions of items never sit in memory as strings. */
  itemIds(): IterableIterator<string>;
}

/**
 * What tells a call's answer from a JSON object of another server (a wrong baseUrl, a proxy that
 * answers `{}`): the fields the caller goes on with. Such an answer is `invalid_response`, never
 * passed on (an open answered `{}` went on to add items to batch `undefined`).
 */
type AnswerShape = (answer: Record<string, unknown>) => boolean;

/**
 * The four fields of the contract's ack result, counting each of the call's `count` IDs once
 * (`acked + duplicates + rejected.length`): an ID an answer leaves out is taken for recorded by
 * whoever acked it (the coalescer's callers), so `{acked: 0, duplicates: 0, rejected: []}` from
 * something else would have finished every job of the call unrecorded.
 */
const isAckResultFor =
  (count: number): AnswerShape =>
  ({ acked, duplicates, rejected, completed }) =>
    typeof acked === 'number' &&
    typeof duplicates === 'number' &&
    Array.isArray(rejected) &&
    Array.isArray(completed) &&
    acked + duplicates + rejected.length === count;

/** A batch: its ID and its state. */
const isBatch: AnswerShape = ({ id, state }) => typeof id === 'string' && typeof state === 'string';

/** A page of batches: the batches and where the next page starts. */
const isBatchPage: AnswerShape = ({ batches, nextCursor }) => Array.isArray(batches) && (nextCursor === null || typeof nextCursor === 'string');

/** A page of failure reasons. */
const isFailurePage: AnswerShape = ({ failures, nextCursor }) => Array.isArray(failures) && (nextCursor === null || typeof nextCursor === 'string');

/** A token's tenant and scopes. */
const isWhoami: AnswerShape = ({ tenant, scopes }) => typeof tenant === 'string' && Array.isArray(scopes);

/** An item's state and its batch's. */
const isItemStatus: AnswerShape = ({ id, state, batchState }) => typeof id === 'string' && typeof state === 'string' && typeof batchState === 'string';

/** An add's answer for `count` items: its batch and groups of that many items in all. */
const isAddedFor =
  (count: number): AnswerShape =>
  ({ batchId, groups }) =>
    typeof batchId === 'string' &&
    Array.isArray(groups) &&
    groups.every((group: Partial<Group> | null) => typeof group?.id === 'string' && Number.isSafeInteger(group.size)) &&
    (groups as Group[]).reduce((sum, group) => sum + group.size, 0) === count;

/**
 * `ack()` of more IDs than one call takes failed after some of its calls were answered: `answered`
 * adds up their results, which are committed (a batch in `answered.completed` is reported complete
 * only there); `cause` is what failed. Send the rest again (acks are idempotent).
 */
export class RollcallPartialAckError extends Error {
  readonly code = 'partial_ack';

  constructor(
    readonly answered: AckResult,
    cause: unknown,
  ) {
    super(
      `the ack failed after ${answered.acked + answered.duplicates + answered.rejected.length} of its IDs were answered: ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause },
    );
    this.name = new.target.name;
  }
}

export interface RollcallClientOptions {
  /** e.g. http://127.0.0.1:8080 */
  baseUrl: string;
  /** A bearer token, when the service has API_TOKENS. */
  token?: string;
  /** Per-request time limit (waits get theirs on top). Default 30 s; Infinity for none; 0 or less is a RangeError. */
  timeoutMs?: number;
  /**
   * Sends each request: the global `fetch`, or any function of its shape that returns `ok`, `status`
   * and `text()`. Default: `httpSend()`, Node's http/https with kept-alive connections (cheaper).
   */
  fetch?: HttpSend;
}

/** The most item IDs the service takes in one ack call. */
export const MAX_IDS_PER_ACK = MAX_ACK_IDS;

/** Item IDs of the given groups, in order, made lazily. */
export function* itemIdsOf(batchId: string, groups: readonly Group[]): IterableIterator<string> {
  for (const group of groups) for (let i = 0; i < group.size; i++) yield `${batchId}:${group.id}:${i}`;
}

/**
 * An ID as one path segment: an ID from elsewhere (a user's input) cannot then steer the request to
 * another route (`../admin/sweep?`). A lone surrogate has no URL form (encodeURIComponent throws):
 * it becomes U+FFFD, as in no ID the service made, so the call is answered 404 rather than thrown.
 */
const pathPart = (id: string): string => {
  const part = encodeURIComponent(toExactText(id));
  // `.` and `..` are steps of the path to a URL parser, as `%2E` is: `client.status('.')` read the
  // list. Sent as `%252E` (the id `%2E`), they name a batch or item that cannot exist: 404, as any such id.
  return part === '.' || part === '..' ? part.replace(/\./g, '%252E') : part;
};

/** Timers take whole milliseconds up to 2^31 - 1 (~24.8 days); longer is treated as that. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** A time limit as a timer takes it: whole, 0 to MAX_TIMER_MS (Infinity included); NaN is 0. */
function timerMs(ms: number): number {
  return Number.isNaN(ms) ? 0 : Math.min(Math.max(Math.ceil(ms), 0), MAX_TIMER_MS);
}

function queryString(query: Record<string, string | number | undefined>): string {
  const parts = Object.entries(query)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${encodeURIComponent(k)}=${queryValue(String(v))}`);
  return parts.length ? `?${parts.join('&')}` : '';
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * A query value, percent-encoded. A lone surrogate has no URL form: URLSearchParams made it U+FFFD,
 * so `list({ userKey: 'a\uD800' })` listed the batches of another key, `'a\uFFFD'`. It is sent as
 * its three bytes, which are no UTF-8: the service answers 400, as it does to that key in an open.
 */
function queryValue(value: string): string {
  let encoded = '';
  let from = 0;
  for (const lone of value.matchAll(LONE_SURROGATE)) {
    const unit = lone[0].charCodeAt(0);
    const bytes = [0xe0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3f), 0x80 | (unit & 0x3f)];
    encoded += encodeURIComponent(value.slice(from, lone.index)) + bytes.map((byte) => `%${byte.toString(16).toUpperCase()}`).join('');
    from = lone.index + 1;
  }
  return encoded + encodeURIComponent(value.slice(from));
}

/** The JSON of an error answer, or nothing when it is not JSON (a proxy's HTML page, a redirect). */
function errorBody(text: string): unknown {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

export class RollcallClient {
  private readonly baseUrl: string;
  private readonly send: HttpSend;

  constructor(private readonly options: RollcallClientOptions) {
    // 0 would end every request before it is sent, not mean "no limit" (that is Infinity).
    if (options.timeoutMs !== undefined && !(options.timeoutMs > 0))
      throw new RangeError(`timeoutMs must be a positive number of milliseconds (or Infinity for no limit), not ${options.timeoutMs}`);
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.send = options.fetch ?? httpSend();
  }

  /**
   * A mark of `text` that only a holder of this client's token can make (an HMAC-SHA256 keyed by the
   * token, base64url): rollcall/amqp marks with it the copy of a message whose work is done, so that
   * a publisher without the token cannot pass work off as done. Without a token anyone can make it,
   * as anyone can then ack.
   */
  markOf(text: string): string {
    return createHmac('sha256', this.options.token ?? '')
      .update(text)
      .digest('base64url');
  }

  /** Opens a batch; with `parentItem` (an item ID of another batch) it is a child standing for that item. */
  open(input: { userKey?: string; metadata?: Record<string, unknown>; callbackUrl?: string; parentItem?: string } = {}): Promise<Batch> {
    return this.request('POST', '/v1/batches', input, { shape: isBatch });
  }

  /** Cancels a batch: terminal; later acks of its items are rejected as `batch_cancelled`. */
  cancel(batchId: string): Promise<Batch> {
    return this.request('POST', `/v1/batches/${pathPart(batchId)}/cancel`, undefined, { shape: isBatch });
  }

  /** One item's state and its batch's state (ask before costly work: a cancelled batch needs none). */
  item(itemId: string, options: { signal?: AbortSignal } = {}): Promise<ItemStatus> {
    return this.request('GET', `/v1/items/${pathPart(itemId)}`, undefined, { shape: isItemStatus, signal: options.signal });
  }

  /** A page of a batch's kept failure reasons, oldest first. */
  failures(batchId: string, query: { limit?: number; cursor?: string } = {}): Promise<FailurePage> {
    return this.request('GET', `/v1/batches/${pathPart(batchId)}/failures${queryString(query)}`, undefined, { shape: isFailurePage });
  }

  async addItems(batchId: string, count: number, options: { idempotencyKey?: string } = {}): Promise<AddedItems> {
    // An empty key is sent, and refused: left out, the add would go without one, and a retry of it add twice.
    const key: unknown = options.idempotencyKey;
    const headers = key !== undefined && key !== null ? { 'idempotency-key': String(key) } : undefined;
    const added = await this.request<{ batchId: string; total: number; groups: Group[] }>(
      'POST',
      `/v1/batches/${pathPart(batchId)}/items`,
      { count },
      { headers, shape: isAddedFor(count) },
    );
    return { ...added, itemIds: () => itemIdsOf(added.batchId, added.groups) };
  }

  seal(batchId: string, options: { expectedItems?: number } = {}): Promise<Batch> {
    return this.request('POST', `/v1/batches/${pathPart(batchId)}/seal`, options, { shape: isBatch });
  }

  /**
   * The tenant and scopes of this client's token (every scope when the service has no tokens): a
   * worker can check at its start that rollcall takes its token (`401` throws) and that it may
   * `consume`, before a job's ack would find out.
   */
  whoami(): Promise<Whoami> {
    return this.request('GET', '/v1/whoami', undefined, { shape: isWhoami });
  }

  status(batchId: string): Promise<Batch> {
    return this.request('GET', `/v1/batches/${pathPart(batchId)}`, undefined, { shape: isBatch });
  }

  delete(batchId: string): Promise<void> {
    return this.request('DELETE', `/v1/batches/${pathPart(batchId)}`);
  }

  /** Batches newest first; `parent` lists the children of that batch, `parentItem` the child standing for that item (if any). */
  list(
    query: { state?: BatchState; userKey?: string; parent?: string; parentItem?: string; limit?: number; cursor?: string } = {},
  ): Promise<{ batches: Batch[]; nextCursor: string | null }> {
    return this.request('GET', `/v1/batches${queryString(query)}`, undefined, { shape: isBatchPage });
  }

  /**
   * Acks any number of IDs (an array or any iterable, such as `itemIds()`), in calls of at most
   * MAX_IDS_PER_ACK, one after another; returns the results added up. `error` goes with every call.
   * A call that fails after others were answered throws RollcallPartialAckError with their results.
   */
  async ack(ids: Iterable<string>, options: AckOptions = {}): Promise<AckResult> {
    // A string is an iterable of strings: its characters went out as IDs, all rejected, nothing acked.
    if (typeof ids === 'string') throw new TypeError('ack() takes a list or iterable of item IDs; pass one ID as [itemId]');
    const total: AckResult = { acked: 0, duplicates: 0, rejected: [], completed: [] };
    let chunk: string[] = [];
    let answeredCalls = 0;
    const extra = { ...(options.outcome ? { outcome: options.outcome } : {}), ...(options.error !== undefined ? { error: options.error } : {}) };
    const flush = async () => {
      let result: AckResult;
      try {
        result = await this.request<AckResult>('POST', '/v1/acks', { ids: chunk, ...extra }, { shape: isAckResultFor(chunk.length) });
      } catch (error) {
        // The calls answered before hold results (a completion among them is reported only once),
        // whatever this one's failure: an answer that is no ack result too.
        throw answeredCalls === 0 ? error : new RollcallPartialAckError(total, error);
      }
      answeredCalls += 1;
      total.acked += result.acked;
      total.duplicates += result.duplicates;
      total.rejected.push(...result.rejected);
      total.completed.push(...result.completed);
      chunk = [];
    };
    try {
      for (const id of ids) {
        chunk.push(id);
        if (chunk.length === MAX_IDS_PER_ACK) await flush();
      }
    } catch (error) {
      // The caller's iterable threw: what was answered before still holds (a completion among it).
      if (error instanceof RollcallPartialAckError || answeredCalls === 0) throw error;
      throw new RollcallPartialAckError(total, error);
    }
    if (chunk.length > 0) await flush();
    return total;
  }

  /**
   * Resolves with the batch once it is complete or cancelled, or with its state when `timeoutMs`
   * (default 60 s; `Infinity` waits as long as it takes) has passed. `signal` ends the wait early:
   * it rejects with the signal's reason (as fetch does), its request cancelled.
   *
   * A wait outlives a deploy: an answer that may change when asked again (a `503` while the service
   * restarts or its database is away, `502`/`504` from a proxy, `429`, a refused or dropped
   * connection) is asked again after `retry`'s backoff (the one the integrations' acks use; by default
   * 20 tries in a row here, 29–44 s of pauses plus each try's own time), within `timeoutMs`; a good answer
   * starts the count again. It throws the last such error once the tries are spent or no time is
   * left, and any other error at once (`404 batch_not_found`, `401`). A `/wait` the service does not
   * answer within its own time plus the client's `timeoutMs` is not asked again: a service that has
   * stopped answering would hold the caller for that long at every try.
   */
  async waitForCompletion(batchId: string, options: { timeoutMs?: number; retry?: Partial<RetryPolicy>; signal?: AbortSignal } = {}): Promise<Batch> {
    const { signal } = options;
    const limit = options.timeoutMs ?? 60_000;
    const retry = retryPolicyOf(options.retry);
    // Monotonic: a wall-clock step (NTP) neither ends the wait at once nor stretches it.
    const deadline = performance.now() + (Number.isNaN(limit) ? 0 : limit);
    for (let failures = 0; ;) {
      signal?.throwIfAborted();
      let batch: Batch;
      try {
        batch = await this.waitOnce(batchId, Math.max(0, deadline - performance.now()), signal);
      } catch (error) {
        signal?.throwIfAborted();
        failures += 1;
        if (failures >= retry.attempts || !isTransient(error) || isTimeLimit(error) || performance.now() >= deadline) throw error;
        await pause(Math.min(retryDelayMs(retry, failures, error), timerMs(deadline - performance.now())), signal);
        continue;
      }
      failures = 0;
      if (batch.state === 'complete' || batch.state === 'cancelled' || performance.now() >= deadline) return batch;
    }
  }

  /** One `/wait` request, of at most 60 s at the service (its limit) and `leftMs`. */
  private waitOnce(batchId: string, leftMs: number, signal: AbortSignal | undefined): Promise<Batch> {
    const seconds = Math.min(60, leftMs / 1000);
    // The request waits at most `seconds` at the service: beyond that and timeoutMs it is not answering.
    return this.request<Batch>('GET', `/v1/batches/${pathPart(batchId)}/wait?timeout=${seconds.toFixed(3)}`, undefined, {
      shape: isBatch,
      extraTimeoutMs: seconds * 1000,
      signal,
    });
  }

  /**
   * Sends a request and reads its answer, within `limitMs` and, when the caller gave one, until its
   * signal aborts. Either ends the call at once, even through a `fetch` of the caller's that does not
   * heed the signal (its request is left to end on its own): the time limit with an `AbortError`, as
   * Node's http reports it, the caller's signal with its reason. Otherwise an ack sent through such a
   * fetch to a service that never answers would hold its jobs for good.
   */
  private async exchange(url: string, request: Omit<HttpRequest, 'signal'>, limitMs: number, caller?: AbortSignal): Promise<{ res: HttpAnswer; text: string }> {
    const limit = AbortSignal.timeout(timerMs(limitMs));
    const read = async (signal: AbortSignal) => {
      const res = await this.send(url, { ...request, signal });
      return { res, text: await res.text() };
    };
    if (!caller) return unlessAborted(read(limit), limit, timeLimitError);
    const linked = linkedSignal(limit, caller);
    try {
      return await unlessAborted(unlessAborted(read(linked.signal), limit, timeLimitError), caller);
    } finally {
      linked.release();
    }
  }

  private async request<T>(
    method: string,
    path: string,
    body?: unknown,
    {
      headers,
      shape,
      extraTimeoutMs = 0,
      signal,
    }: { headers?: Record<string, string>; shape?: AnswerShape; extraTimeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<T> {
    const { res, text } = await this.exchange(
      `${this.baseUrl}${path}`,
      {
        method,
        headers: {
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...(this.options.token ? { authorization: `Bearer ${this.options.token}` } : {}),
          ...headers,
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      },
      (this.options.timeoutMs ?? 30_000) + extraTimeoutMs,
      signal,
    );
    if (!res.ok) {
      const error = (errorBody(text) as { error?: { code?: string; message?: string } } | undefined)?.error;
      const retryAfter = retryAfterMs(res.headers?.get('retry-after'));
      const held = heldBatchIdsOf(res.headers?.get(HELD_BATCHES_HEADER));
      throw new RollcallApiError(res.status, error?.code ?? 'http_error', error?.message ?? `HTTP ${res.status}`, retryAfter, held);
    }
    // Only a delete is answered 204 by rollcall, and always so: any other call answered so (a proxy, a
    // wrong baseUrl) is no answer, and must not reach its caller as `undefined` (an ack read it as a
    // network error, retried); nor must a delete answered with a body, which no deleted batch gives.
    if (method === 'DELETE') {
      if (res.status === 204) return undefined as T;
      throw new RollcallApiError(
        res.status,
        'invalid_response',
        `the answer to ${method} ${path} is not rollcall's 204: ${JSON.stringify(text.slice(0, 100))}`,
      );
    }
    let answer: unknown;
    try {
      answer = JSON.parse(text);
    } catch {
      answer = undefined;
    }
    // rollcall answers every other 2xx with a JSON object: anything else (a login page, an empty or
    // `null` body) comes from a proxy or a wrong baseUrl, and must not pass for an answer.
    if (typeof answer !== 'object' || answer === null || Array.isArray(answer))
      throw new RollcallApiError(res.status, 'invalid_response', `the answer to ${method} ${path} is not a JSON object: ${JSON.stringify(text.slice(0, 100))}`);
    if (shape && !shape(answer as Record<string, unknown>))
      throw new RollcallApiError(
        res.status,
        'invalid_response',
        `the answer to ${method} ${path} is not what rollcall answers: ${JSON.stringify(text.slice(0, 100))}`,
      );
    return answer as T;
  }
}
