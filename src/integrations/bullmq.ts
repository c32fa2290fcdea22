/**
 * `import { rollcallProcessor } from 'rollcall/bullmq'`: a BullMQ processor that acks each job's
 * rollcall item — `succeeded` after the handler, `failed` only when BullMQ will not run it again.
 * bullmq is an optional peer dependency: only this entry point needs it.
 */
import { isMainThread } from 'node:worker_threads';

import { Backoffs, BackoffStrategy, DelayedError, errorToJSON, Job, UnrecoverableError, WaitingChildrenError, WaitingError } from 'bullmq';

import type { RollcallClient } from '../client';
import { unlessAborted } from '../client/abortable';
import { AckCoalescingOptions, partOf, Rejected, rejectionIn, Rejections, sharedCoalescer } from './ackCoalescer';
import { answered, defaultItemIdOf, HANDED_OVER, SUCCESS_REJECTED, SUCCESS_UNRECORDED, watchWorkerOf } from './bullmqFailureWatch';
import { CancelCheckOptions, sharedCancelledBatches } from './cancelledBatches';
import { HandedToChild, isHandedToChild } from './childBatch';
import { asError, failureMessageOf, IntegrationErrorCode, RollcallIntegrationError } from './errors';
import { PromisedItemIdError, synchronousItemIdOf } from './itemIdOf';
import { sharedTokenCheck, TOKEN_RECHECK_MS } from './tokenCheck';

export type { FailureWatchOptions, WatchableWorker } from './bullmqFailureWatch';
export { SUCCESS_REJECTED, SUCCESS_UNRECORDED, watchFailedJobs } from './bullmqFailureWatch';

/** What the integrations throw or report, with a stable `code`: `instanceof` it to tell them. */
export { type IntegrationErrorCode, RollcallIntegrationError } from './errors';
/** What a handler returns once it opened a child batch for its own item. */
export { type HandedToChild, handedToChild } from './childBatch';

export interface RollcallProcessorOptions<DataType, ResultType, NameType extends string> extends AckCoalescingOptions, CancelCheckOptions {
  /** Where a job's item ID is. Default: `job.data.rollcallItemId`. */
  itemIdOf?: (job: Job<DataType, ResultType, NameType>) => string | undefined;
  /**
   * The Worker's `maxStartedAttempts`, for a sandboxed processor, whose jobs do not carry the
   * Worker: a job started that many times is not retried, so its failure is then the last one.
   * Elsewhere the Worker's own (`job.queue.opts`, where BullMQ reads it) is read, and this is not
   * used: BullMQ decides by the Worker's.
   */
  maxStartedAttempts?: number;
  /**
   * The Worker's `settings.backoffStrategy`, for a sandboxed processor, as `maxStartedAttempts`: a
   * failure for which it returns -1 is not retried, so it is then the last.
   */
  backoffStrategy?: BackoffStrategy;
}

/** A job's handler: its result, or `handedToChild(result)` once it opened a child batch for the job's item. */
export type RollcallHandler<DataType, ResultType, NameType extends string> = (
  job: Job<DataType, ResultType, NameType>,
  token?: string,
  signal?: AbortSignal,
) => Promise<ResultType | HandedToChild<ResultType>>;

/** What BullMQ's Worker calls; `undefined` is the result of a job whose batch was cancelled. */
export type RollcallBullmqProcessor<DataType, ResultType, NameType extends string> = (
  job: Job<DataType, ResultType, NameType>,
  token?: string,
  signal?: AbortSignal,
) => Promise<ResultType | undefined>;

/** An error of the integration that BullMQ must not retry (a job no retry can fix). */
export class RollcallJobError extends UnrecoverableError {
  constructor(
    readonly code: IntegrationErrorCode,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message);
    // BullMQ recognises an UnrecoverableError by class or by this name; the name also works when the
    // worker's copy of bullmq is not the one this module loaded.
    this.name = 'UnrecoverableError';
    if (options.cause !== undefined) this.cause = options.cause;
  }
}

/**
 * Throws, as BullMQ would, for a result it cannot store (`moveToCompleted`: a BigInt, a cycle) or, in
 * a sandbox on worker threads (`useWorkerThreads`), cannot pass from the thread to its Worker (its
 * `postMessage` is a structured clone, which refuses a function or a symbol that JSON drops, and
 * drops the prototypes, so a class's `toJSON` no longer applies when the Worker stores the copy):
 * checked before the `succeeded` ack, so rollcall does not record a success that BullMQ then fails
 * (and retries). Plain values cost a `typeof`; an object is serialised once more (and, from a
 * worker thread, cloned first).
 */
function assertStorable(result: unknown, sandboxed: boolean): void {
  const stored = sandboxed && !isMainThread ? acrossThreads(result) : result;
  if (typeof stored === 'object' ? stored !== null : typeof stored === 'bigint') JSON.stringify(stored);
}

/** What the Worker gets of a result its sandbox's worker thread posts to it (a structured clone). */
function acrossThreads(result: unknown): unknown {
  if (typeof result !== 'object' && typeof result !== 'function' && typeof result !== 'symbol') return result;
  try {
    return structuredClone(result);
  } catch (refused) {
    // An Error of our own: BullMQ copies only own properties from a sandbox, and a DOMException's
    // message is not one, so the job would fail with an empty reason.
    throw new Error(`the handler's result cannot leave the sandbox's worker thread: ${asError(refused).message}`, { cause: refused });
  }
}

/**
 * Errors a handler throws to steer BullMQ, not because the job failed: BullMQ moves the job without
 * counting an attempt (worker.ts `handleFailed`), so rollcall must not hear of them either. BullMQ
 * tells them as this does: the rate limit by its message alone (an error of another message, even
 * one named `RateLimitError`, fails the job like any other), the others by class or by name.
 */
const STEERING_ERRORS = new Set(['DelayedError', 'WaitingError', 'WaitingChildrenError']);
/** Their classes, those the installed bullmq has (WaitingError came after 5.0). */
const STEERING_CLASSES = [DelayedError, WaitingError, WaitingChildrenError].filter((c): c is typeof DelayedError => typeof c === 'function');
const RATE_LIMIT_MESSAGE = 'bullmq:rateLimitExceeded';
const UNRECOVERABLE_ERRORS = new Set(['UnrecoverableError']);

function steersBullmq(error: Error, job: object): boolean {
  return error.message === RATE_LIMIT_MESSAGE || isBullmqError(error, job, STEERING_ERRORS, STEERING_CLASSES);
}

/**
 * Whether `error` is one of BullMQ's own errors (`names`, `classes`) as the job's bullmq tells it: by
 * name or by class. A job of another installed copy of bullmq (an app whose bullmq is not the one
 * rollcall resolves) is told by that copy's classes, which are not ours: a subclass of its
 * `DelayedError` has its own name and is no instance of ours, so there the names of the classes the
 * error descends from are read instead.
 */
function isBullmqError(error: Error, job: object, names: ReadonlySet<string>, classes: ReadonlyArray<abstract new (...args: never[]) => Error>): boolean {
  if (names.has(error.name) || classes.some((bullmqClass) => error instanceof bullmqClass)) return true;
  if (job instanceof Job || Object.getPrototypeOf(job) === Object.prototype) return false;
  for (let proto: unknown = Object.getPrototypeOf(error); proto !== null && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
    const className: unknown = (proto as { constructor?: { name?: unknown } }).constructor?.name;
    if (typeof className === 'string' && names.has(className)) return true;
  }
  return false;
}

/**
 * Whether BullMQ will give up on this job after this error, mirroring `Job.shouldRetryJob` (bullmq
 * 5 and 6): it retries only while `attemptsMade + 1 < opts.attempts` (no `attempts` means one), the
 * error is not an `UnrecoverableError`, (bullmq 6.7) the Worker's `maxStartedAttempts` is not reached,
 * and (bullmq 5, which has `job.discard()`) the job was not discarded.
 * `attemptsMade` counts the failed runs before this one, so it is 0 on the first run.
 */
export function isLastAttempt(job: Pick<Job, 'attemptsMade' | 'attemptsStarted' | 'opts'>, error: Error, maxStartedAttempts?: number): boolean {
  if (isBullmqError(error, job, UNRECOVERABLE_ERRORS, [UnrecoverableError])) return true;
  if ((job as { discarded?: unknown }).discarded === true) return true;
  if (maxStartedAttempts && maxStartedAttempts <= job.attemptsStarted && retriesStopAtMaxStarted(job)) return true;
  return job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
}

/** Per Job class: whether its `shouldRetryJob` stops retries at the Worker's `maxStartedAttempts`. */
const STOPS_AT_MAX_STARTED = new WeakMap<object, boolean>();

/**
 * Whether the job's BullMQ stops retrying at `maxStartedAttempts`. bullmq 6.7's `shouldRetryJob`
 * does; bullmq 5 (and 6.0–6.2 at least) retries such a job and fails it for good when it is next
 * picked up, without running it (the failure watch records that). Told by reading the job's own
 * `shouldRetryJob` (a private method), as the version is not on the job. A sandbox's job is a plain
 * copy without it: there `options.maxStartedAttempts` is taken as given.
 */
function retriesStopAtMaxStarted(job: object): boolean {
  const jobClass: unknown = Object.getPrototypeOf(job);
  const shouldRetryJob = (jobClass as { shouldRetryJob?: unknown } | null)?.shouldRetryJob;
  if (typeof shouldRetryJob !== 'function') return true;
  let stops = STOPS_AT_MAX_STARTED.get(jobClass as object);
  if (stops === undefined)
    STOPS_AT_MAX_STARTED.set(jobClass as object, (stops = Function.prototype.toString.call(shouldRetryJob).includes('maxStartedAttempts')));
  return stops;
}

interface WorkerOptions {
  maxStartedAttempts?: number;
  lockDuration?: number;
  settings?: { backoffStrategy?: BackoffStrategy };
}

/**
 * The options of the Worker running `job`, as BullMQ's own retry decision reads them (job.ts
 * `shouldRetryJob`, bullmq 5 and 6: `this.queue.opts`, a property its typings mark protected);
 * undefined in a sandbox, whose jobs are plain objects.
 */
function carriedWorkerOptionsOf(job: Job): WorkerOptions | undefined {
  return (job as unknown as { queue?: { opts?: WorkerOptions } }).queue?.opts;
}

function workerOptionsOf(job: Job): WorkerOptions {
  return carriedWorkerOptionsOf(job) ?? {};
}

/**
 * Whether the job's backoff stops BullMQ's retries of this failure: BullMQ computes the next delay
 * (its own strategies, `fixed`, `exponential`, …, or the Worker's custom one for another
 * `backoff.type`) and does not retry when it is -1 (job.ts `shouldRetryJob`): a custom strategy's
 * answer, or a built-in delay of -1 (`backoff: -1`). Computed here as BullMQ computes it, on the
 * value BullMQ gives the strategy (`thrown`: what was thrown, not an Error made of it, since a
 * strategy may tell the two apart). A strategy that throws is left for BullMQ to meet.
 */
async function backoffStops(job: Job, thrown: unknown, strategy: BackoffStrategy | undefined): Promise<boolean> {
  if (job.opts.backoff === undefined) return false;
  const backoff = Backoffs.normalize(job.opts.backoff);
  if (!backoff) return false;
  try {
    return Number(await Backoffs.calculate(backoff, job.attemptsMade + 1, thrown as Error, job, strategy)) === -1;
  } catch {
    return false;
  }
}

/** BullMQ's Worker's `lockDuration` when its options do not say (bullmq 5 and 6). */
const DEFAULT_LOCK_DURATION_MS = 30_000;

/**
 * Whether this run still holds its job's lock, so that BullMQ will record its failure. A run whose
 * lock was lost (an event loop blocked past `lockDuration`, a renewal that failed) cannot move its
 * job (BullMQ's `moveToFailed` finds the lock missing, or another run's), and a stall check has put
 * the job back to run again, or failed it for good, which the failure watch records. Acking
 * `failed` for such a run would finish a batch early that the rerun then succeeds in. Asked with
 * BullMQ's own `extendLock`, which also gives the ack that follows a whole `lockDuration`. A run that cannot be asked (a
 * sandbox's plain copy of the job, or no token) is taken as holding it; one whose question fails
 * (Redis away) is not: BullMQ cannot move its job either, and if it later does, the watch records it.
 */
async function holdsLock(job: Job, token: string | undefined, sandboxed: boolean): Promise<boolean> {
  if (sandboxed || typeof token !== 'string' || token === '0' || typeof job.extendLock !== 'function') return true;
  try {
    return Number(await job.extendLock(token, workerOptionsOf(job).lockDuration ?? DEFAULT_LOCK_DURATION_MS)) === 1;
  } catch {
    return false;
  }
}

/**
 * What a run cancelled before its handler began throws: a plain error, one failed attempt, as a
 * handler that throws on the signal fails it. Not unrecoverable: `cancelAllJobs` also stops a
 * Worker (BullMQ's own shutdown example), and jobs that never ran must not fail for good then;
 * nor could their failure be recorded while rollcall refuses the token they waited on.
 */
function cancelledRun(reason: unknown): Error {
  return new Error(`the job was cancelled before it ran: ${reason instanceof Error ? reason.message : String(reason)}`);
}

/**
 * Puts back a job that rollcall could not record (its worker's token refused), without running it
 * and without counting an attempt (BullMQ's `moveToDelayed` skips the attempt, though it counts a
 * start): it runs when a Worker whose token is taken, or this one once its token is, picks it up
 * again. A run that cannot move its job (no token: manual processing; Redis refused the move)
 * fails with the refusal, as any error.
 */
async function putBack(job: Job, token: string | undefined, refusal: RollcallIntegrationError): Promise<never> {
  if (typeof token !== 'string' || token === '0' || typeof job.moveToDelayed !== 'function') throw refusal;
  try {
    await job.moveToDelayed(Date.now() + TOKEN_RECHECK_MS, token);
  } catch (moveError) {
    throw new RollcallIntegrationError('token_refused', `${refusal.message}; the job could not be put back: ${asError(moveError).message}`, {
      cause: moveError,
    });
  }
  throw new DelayedError(refusal.message);
}

/**
 * What was thrown, as BullMQ's Worker will judge it. In the worker's own process BullMQ looks at
 * the thrown value itself, a plain object too (`{ name: 'UnrecoverableError', … }`). From a sandboxed
 * processor it gets the value's own properties, through JSON, copied onto a new Error
 * (child-processor.ts and sandbox.ts, with BullMQ's own `errorToJSON`): a class survives only as an
 * own `name` (so a subclass of UnrecoverableError, whose constructor names it after itself, is
 * retried), a nested `cause` as a plain object, a Date as a string; and a value without a message
 * becomes `new Error(String(value))`.
 */
export function asBullmqSeesIt(thrown: unknown, sandboxed: boolean): Error {
  const value = typeof thrown === 'object' && thrown !== null ? (thrown as Record<string, unknown>) : null;
  if (!sandboxed) return value ? (value as unknown as Error) : asError(thrown);
  if (!value?.message) return new Error(String(thrown));
  try {
    return Object.assign(new Error(), errorToJSON(value));
  } catch {
    // A property JSON refuses (a BigInt): BullMQ's child cannot report such an error either.
    const copy = new Error();
    for (const key of Object.getOwnPropertyNames(value)) Object.assign(copy, { [key]: value[key] });
    return copy;
  }
}

/**
 * What a handler threw, as the processor passes it on: `undefined` and `null` become an Error that
 * says so. BullMQ (5 and 6) reads `.message` of what the processor throws, and on these its own
 * failure handling throws: the job is left active, stalls, and runs again, whatever rollcall was told.
 */
function failureOf(thrown: unknown): unknown {
  return thrown === undefined || thrown === null ? new Error(`the handler threw ${String(thrown)}`) : thrown;
}

/** The failure of a run that handed its item to a child, marked so that no failure watch records the item (HANDED_OVER). */
function handedOverFailure(job: object, caught: unknown): Error {
  answered(job);
  return new Error(`${HANDED_OVER} ${asError(caught).message}`, { cause: caught });
}

/**
 * A BullMQ processor around `handler`: `new Worker(queue, rollcallProcessor(client, handler), …)`.
 * - The job's item ID comes from `job.data.rollcallItemId` (or `options.itemIdOf(job)`); a job
 *   without one fails at once (`missing_item_id`, not retried).
 * - A job whose batch is cancelled is not run: it completes with `undefined`.
 * - The handler succeeds: the item is acked `succeeded`, then the job completes with the handler's result.
 *   A handler that opened a child batch for the item returns `handedToChild(result)`: the job
 *   completes with `result` and the item is not acked; the child's outcome records it.
 * - The handler throws and BullMQ will retry: the error is rethrown, nothing is acked.
 * - The handler throws on the last attempt (or throws `UnrecoverableError`): the item is acked
 *   `failed` with the error's message, then the error is rethrown. Not when the run has lost its
 *   job's lock (holdsLock): BullMQ runs the job again, or fails it and the failure watch records it.
 * - Once an ack is answered `401` or `403`, each job first waits for rollcall's word on the token
 *   (`GET /v1/whoami`: at once, then TOKEN_RECHECK_MS after each answer while refused). While
 *   rollcall refuses it (a `401`, or no `consume` scope), jobs are not run but put back
 *   (`moveToDelayed`, no attempt counted), and a process warning (`token_refused`) says so, at
 *   most one a minute. The runs whose acks were refused fail as in an outage (below). A job
 *   cancelled while it waits (BullMQ's abort signal, for a handler that takes it) fails the
 *   attempt at once with the signal's reason, unrun.
 * - A job BullMQ fails for good without running it (stalled past `maxStalledCount`, started past
 *   `maxStartedAttempts`, a flow parent failed by its child) is acked `failed` by the Worker's
 *   failure watch (`watchFailedJobs`): the processor starts it on the first job it runs in the
 *   Worker's process; start it with the Worker to cover that Worker's first jobs too.
 * Acks of every job that the processors and consumers of this client run in the process are merged
 * into few calls (sharedCoalescer);
 * each job still completes only after rollcall answered for its own item.
 * BullMQ's abort signal reaches the handler when the handler declares a third parameter: BullMQ's
 * own rule for processors (`processor.length >= 3`), so a wrapper with rest parameters gets none.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the same defaults as BullMQ's own Processor<DataType, ResultType>
export function rollcallProcessor<DataType = any, ResultType = any, NameType extends string = string>(
  client: RollcallClient,
  handler: RollcallHandler<DataType, ResultType, NameType>,
  options: RollcallProcessorOptions<DataType, ResultType, NameType> = {},
): RollcallBullmqProcessor<DataType, ResultType, NameType> {
  const acks = sharedCoalescer(client, options);
  const cancelled = sharedCancelledBatches(client, options);
  const tokens = sharedTokenCheck(client);
  const itemIdOf = options.itemIdOf
    ? synchronousItemIdOf(options.itemIdOf)
    : (defaultItemIdOf as (job: Job<DataType, ResultType, NameType>) => string | undefined);
  const watchOptions = { ...options, itemIdOf };

  /**
   * Acts on a rejection of a success: cancelled batches are remembered; anything else no rerun by
   * this Worker can fix (its token's tenant, a batch deleted), so the job fails for good, marked
   * SUCCESS_REJECTED: no watch records it failed, and a retry once fixed records its success.
   */
  const settle = (job: Job<DataType, ResultType, NameType>, itemId: string, rejections: Rejections): void => {
    if (rejections.size === 0 && rejections.unsent === undefined) return;
    const rejected = rejectionIn(rejections, itemId);
    if (rejected === null) return;
    if (rejected === 'batch_cancelled') return cancelled.learnCancelled(itemId);
    answered(job);
    throw new RollcallJobError('ack_rejected', `${SUCCESS_REJECTED} ${itemId}: ${rejected}`);
  };

  /**
   * Acks the last failure; if rollcall cannot be told, or refuses it, the job's failure says so (its
   * item stays pending, for the failure watch to record). That error is unrecoverable: the handler's
   * failure was the last, and a plain error in its place would let BullMQ retry a job whose handler
   * threw `UnrecoverableError` (or whose backoff strategy said -1 for the handler's error).
   */
  const ackLastFailure = async (job: Job<DataType, ResultType, NameType>, itemId: string, message: string): Promise<void> => {
    let rejected: Rejected;
    try {
      rejected = await acks.ack(itemId, 'failed', message);
    } catch (ackError) {
      tokens.learn(ackError);
      throw new RollcallJobError('failure_unrecorded', `${message} (and rollcall could not record the failure: ${asError(ackError).message})`, {
        cause: ackError,
      });
    }
    answered(job);
    if (rejected === 'batch_cancelled') cancelled.learnCancelled(itemId);
    else if (rejected !== null) throw new RollcallJobError('ack_rejected', `${message} (and rollcall rejected the failure of item ${itemId}: ${rejected})`);
  };

  /**
   * Whether BullMQ will not run the job again after this failure, with the Worker's options as BullMQ
   * reads them. `error` is the failure as BullMQ judges it (asBullmqSeesIt); `thrown`, the value its
   * backoff strategy is given: what the handler threw, or in a sandbox that same copy.
   */
  const isLastFailure = async (job: Job<DataType, ResultType, NameType>, error: Error, thrown: unknown): Promise<boolean> => {
    // The Worker's settings where the job carries them (BullMQ decides by those), else the options'.
    const worker = carriedWorkerOptionsOf(job);
    const maxStartedAttempts = worker ? worker.maxStartedAttempts : options.maxStartedAttempts;
    if (isLastAttempt(job, error, maxStartedAttempts)) return true;
    return backoffStops(job, thrown, worker ? worker.settings?.backoffStrategy : options.backoffStrategy);
  };

  /**
   * The job's item ID. A job with none fails at once, unretried, marked answered (its own failure
   * says why: the failure watch need not report it again); so does one whose itemIdOf threw or gave
   * a promise: its reruns would find none either, and its item would stay pending.
   */
  const itemIdOfJob = (job: Job<DataType, ResultType, NameType>): string => {
    let itemId: string | undefined;
    try {
      itemId = itemIdOf(job);
    } catch (thrown) {
      answered(job);
      const reason = thrown instanceof PromisedItemIdError ? thrown.message : `itemIdOf threw for job ${job.id}: ${failureMessageOf(thrown)}`;
      throw new RollcallJobError('missing_item_id', reason, { cause: thrown });
    }
    if (typeof itemId === 'string' && itemId) return itemId;
    answered(job);
    throw new RollcallJobError('missing_item_id', `job ${job.id} has no rollcall item ID`);
  };

  const processor: RollcallBullmqProcessor<DataType, ResultType, NameType> = async (job, token, signal) => {
    watchWorkerOf(client, job, watchOptions);
    const itemId = itemIdOfJob(job);
    const cancelledNow = cancelled.isCancelled(itemId);
    if (cancelledNow === true || (cancelledNow !== false && (await cancelledNow))) return undefined;
    if (tokens.suspect) {
      // A job cancelled meanwhile (`worker.cancelJob`) fails the attempt, as a handler heeding the signal would.
      const refusal = await (signal ? unlessAborted(tokens.verdict(), signal, cancelledRun) : tokens.verdict());
      if (refusal) return putBack(job, token, refusal);
    }
    // A sandboxed processor gets a plain object, not a Job of any copy of bullmq (child-processor.ts `wrapJob`).
    const sandboxed = Object.getPrototypeOf(job) === Object.prototype;
    let result: ResultType;
    let toChild = false;
    try {
      const returned = await handler(job, token, signal);
      toChild = isHandedToChild(returned);
      result = toChild ? (returned as HandedToChild<ResultType>).result : (returned as ResultType);
      assertStorable(result, sandboxed);
    } catch (caught) {
      // The item is the child's to record, whatever BullMQ makes of a result it cannot store.
      if (toChild) throw handedOverFailure(job, caught);
      const thrown = failureOf(caught);
      const error = asBullmqSeesIt(thrown, sandboxed);
      const givenToBackoff = sandboxed ? error : thrown;
      if (!steersBullmq(error, job) && (await isLastFailure(job, error, givenToBackoff)) && (await holdsLock(job, token, sandboxed))) {
        await ackLastFailure(job, itemId, failureMessageOf(error, thrown));
      }
      throw thrown;
    }
    if (toChild) return result;
    try {
      // settle throws too: an ack left unsent after a split call (413) carries that call's refusal.
      const answer = await acks.ackInCall(itemId, 'succeeded');
      settle(job, itemId, answer.later ? await partOf(answer, itemId) : answer); // later: split off for a held batch
    } catch (ackError) {
      if (ackError instanceof RollcallJobError) throw ackError; // settle's: rollcall rejected the success
      tokens.learn(ackError); // the jobs after this one wait for rollcall's word on the token
      // Marked, so that a watch seeing the job failed for good records the work done, not failed.
      throw new Error(`${SUCCESS_UNRECORDED} ${itemId}: ${asError(ackError).message}`, { cause: ackError });
    }
    return result;
  };
  // BullMQ makes an AbortController for every job of a processor that declares a third parameter
  // (Worker's `processorAcceptsSignal`), a cost a no-op worker notices (docs/benchmarks.md). Declare
  // it only for a handler that takes the signal.
  return handler.length >= 3 ? processor : (job, token) => processor(job, token);
}
