/**
 * The failures BullMQ decides without running the processor: a job stalled more often than the
 * Worker's `maxStalledCount`, started more than its `maxStartedAttempts`, or a flow parent whose
 * child failed with `failParentOnFailure`, is failed for good by the Worker that next picks it up
 * (bullmq 5 and 6: `getUnrecoverableErrorMessage`), and only the Worker's `failed` event tells. This
 * watch acks their items `failed`, so their batches complete.
 */
import { Job, Queue, type QueueOptions } from 'bullmq';

import type { RollcallClient } from '../client';
import { unlessAborted } from '../client/abortable';
import { isTransient } from '../client/retry';
import { AckCoalescingOptions, ItemOutcome, keepingProcessAlive, Rejected, sharedCoalescer } from './ackCoalescer';
import { FailedSet, recentFailuresOf } from './bullmqRecentFailures';
import { asError, failureMessageOf, RollcallIntegrationError, warn } from './errors';
import { synchronousItemIdOf } from './itemIdOf';

export interface FailureWatchOptions<DataType, ResultType, NameType extends string> extends AckCoalescingOptions {
  /** Where a job's item ID is. Default: `job.data.rollcallItemId` (as the processor's). */
  itemIdOf?: (job: Job<DataType, ResultType, NameType>) => string | undefined;
  /**
   * At its start, `watchFailedJobs` acks `failed` again for the jobs the Worker's queue failed within
   * this many milliseconds before (the newest 10,000 at most): a failure whose ack a crash cut off is
   * recorded by the restarted Worker's watch (what was recorded already counts as a duplicate).
   * Default 15 minutes; 0 or less: none.
   */
  recoverFailedWithinMs?: number;
  /** Called once the look-back has ended (not when the watch was stopped first), with how many failed jobs of the window it went through. */
  onRecovered?: (failures: number) => void;
}

/** How far back a watch's start looks for failures whose ack may have been lost, by default. */
const RECOVER_FAILED_WITHIN_MS = 15 * 60_000;

/** The pause before failures whose ack could not be sent are sent again (or `retryForMs`, when shorter). */
const UNRECORDED_PAUSE_MS = 30_000;

/** The most such failures a watch keeps to send again. */
const UNRECORDED_KEPT = 10_000;

/** The most failures one start acks again (the newest). */
const RECOVERY_LIMIT = 10_000;

type FailedListener = (job: Job | undefined, error: Error) => void;

/** A failure's ack as the watch sends it (kept, not the Job, while it waits to be sent again). */
interface FailureAck {
  jobId: string | undefined;
  itemId: string;
  outcome: ItemOutcome;
  reason: string;
}

/** What the watch needs of a Worker (BullMQ's, 5 or 6): its `failed` event, and its `error` event to report on. */
export interface WatchableWorker {
  on(event: 'failed', listener: FailedListener): unknown;
  off(event: 'failed', listener: FailedListener): unknown;
  emit(event: 'error', error: Error): boolean;
  listenerCount(event: 'error'): number;
  /** The queue's name and the Worker's options: where its failed jobs are, for the recovery at start. */
  readonly name?: string;
  readonly opts?: { connection?: unknown; prefix?: string };
}

/**
 * Each watched Worker's stop, so a Worker is watched once however often it is asked. A stopped watch
 * stays here: the processor's next job must not start it again.
 */
const WATCHES = new WeakMap<object, () => Promise<void>>();

/**
 * The jobs (BullMQ's Job objects, one per run) whose failure rollcall has answered for (the item
 * acked `failed`, or its ack refused): the watch skips them, so an item is acked once. BullMQ hands
 * the `failed` event the Job it ran in the Worker's own process; a sandbox runs a copy, so its
 * failures are acked again and count as duplicates. By the run, not by what was thrown: a handler
 * may throw the same error object for many jobs, or a string, which cannot be marked.
 */
const ANSWERED_RUNS = new WeakSet<object>();

/**
 * How the failure of a run begins whose handler succeeded but whose item rollcall rejected (another
 * tenant's token sees every batch as unknown): the live watch skips it (an answered run), and the
 * look-back of a later Worker skips it too, rather than record as failed, maybe with the right
 * token by then, work that was done. A retry of the job records its success.
 */
export const SUCCESS_REJECTED = 'the handler succeeded, but rollcall rejected item';

/**
 * How the failure of a run begins whose handler succeeded but whose ack rollcall did not take (out
 * of reach past `retryForMs`, a token refused): the work was done, so a watch that sees the job
 * failed for good records the item `succeeded`, not `failed` (a batch whose every job succeeded
 * ended failed with "connect ECONNREFUSED"). With attempts left, BullMQ runs the job again.
 */
export const SUCCESS_UNRECORDED = 'the handler succeeded, but rollcall did not take the ack of item';

/**
 * How the failure of a run begins whose handler handed its item to a child batch
 * (`handedToChild`) and whose job BullMQ then failed (a result it cannot store): the item is the
 * child's to record, so no watch records it `failed`.
 */
export const HANDED_OVER = 'the handler handed its item to a child batch, but';

/** A failure whose item is not the watch's to record: a success rollcall rejected, or an item handed to a child. */
function notForTheWatch(job: Job): boolean {
  const reason = job.failedReason;
  return typeof reason === 'string' && (reason.startsWith(SUCCESS_REJECTED) || reason.startsWith(HANDED_OVER));
}

/** What a job failed for good did to its item: a success whose ack rollcall did not take is one. */
function outcomeOf(job: Job): ItemOutcome {
  return typeof job.failedReason === 'string' && job.failedReason.startsWith(SUCCESS_UNRECORDED) ? 'succeeded' : 'failed';
}

/** Marks a run whose failure rollcall has answered for. */
export function answered(job: object): void {
  ANSWERED_RUNS.add(job);
}

export function defaultItemIdOf(job: Job): string | undefined {
  const data: unknown = job.data;
  const id = data && typeof data === 'object' ? (data as { rollcallItemId?: unknown }).rollcallItemId : undefined;
  return typeof id === 'string' ? id : undefined;
}

function isWatchable(worker: object): worker is WatchableWorker {
  const methods = worker as Record<keyof WatchableWorker, unknown>;
  return (
    typeof methods.on === 'function' && typeof methods.off === 'function' && typeof methods.emit === 'function' && typeof methods.listenerCount === 'function'
  );
}

/**
 * Watches a Worker's failures for good (`import { watchFailedJobs } from 'rollcall/bullmq'`): a job
 * BullMQ will not run again, whose failure rollcall has not answered for, has its item acked
 * `failed` with BullMQ's reason. Call it right after making the Worker: `rollcallProcessor` starts it
 * by itself only on the first job it runs in the Worker's process, too late for a Worker started
 * after a crash (the stalled jobs come first), and never for a sandboxed processor. Returns a
 * function that stops the watch and waits for its acks.
 *
 * The ack goes after BullMQ has failed the job, and the process stays alive until it is answered
 * (or `retryForMs` is spent): a process that ends within that call (a crash, a `process.exit()`
 * right after `worker.close()` without awaiting the stop) leaves the item pending until the
 * next watch starts: each looks back `recoverFailedWithinMs` and acks the queue's failures of that
 * time again (recorded ones count as duplicates). What it cannot record is reported on the
 * Worker's `error` event (code `failure_unrecorded`), or as a process warning when it has no
 * listener: rollcall refused it, or could not be reached after the retries (sent again after a
 * pause while the watch runs, and once more at its stop), or the job has no item
 * ID where the watch's `itemIdOf` looks (give it the processor's; the first such job only).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the same defaults as BullMQ's own Job<DataType, ResultType>
export function watchFailedJobs<DataType = any, ResultType = any, NameType extends string = string>(
  client: RollcallClient,
  worker: WatchableWorker,
  options: FailureWatchOptions<DataType, ResultType, NameType> = {},
): () => Promise<void> {
  const watching = WATCHES.get(worker);
  if (watching) return watching;
  const acks = sharedCoalescer(client, options);
  const stopping = new AbortController();
  const itemIdOf = synchronousItemIdOf((options.itemIdOf ?? defaultItemIdOf) as (job: Job) => string | undefined);
  const report = (message: string, cause?: unknown): void => {
    const error = new RollcallIntegrationError('failure_unrecorded', message, { cause });
    // An `error` listener that throws must not reach BullMQ, nor become an unhandled rejection.
    try {
      if (worker.listenerCount('error') > 0) worker.emit('error', error);
      else warn(error);
    } catch {
      warn(error);
    }
  };
  /** What acking a run's failure sends: its item `failed` with the reason, or `succeeded` (outcomeOf); none without an item ID. Throws what itemIdOf throws. */
  const ackOf = (job: Job, reason: string): FailureAck | undefined => {
    const itemId = itemIdOf(job);
    return typeof itemId === 'string' && itemId ? { jobId: job.id, itemId, outcome: outcomeOf(job), reason } : undefined;
  };
  const sendAck = (ack: FailureAck): Promise<Rejected> =>
    ack.outcome === 'succeeded' ? acks.ack(ack.itemId, 'succeeded') : acks.ack(ack.itemId, 'failed', ack.reason);
  /**
   * Acks again a failure of the past; passed over: a job whose itemIdOf throws (reported when it
   * failed), and one whose item is not the watch's (a success rollcall rejected, an item handed to a child).
   */
  const recordAgain = (job: Job): Promise<unknown> => {
    if (notForTheWatch(job)) return Promise.resolve();
    let ack: FailureAck | undefined;
    try {
      ack = ackOf(job, job.failedReason);
    } catch {
      return Promise.resolve();
    }
    // Held as `record`'s acks are: the look-back's connection may be the user's, closed before it ends.
    return ack ? keepingProcessAlive(sendAck(ack)) : Promise.resolve();
  };
  /** Whether a job without an item ID was reported: once a watch, as a Worker may also run jobs outside rollcall. */
  let reportedNoItemId = false;
  /**
   * Failures whose ack could not be sent (rollcall out of reach past `retryForMs`), by job: sent
   * again after a pause while the watch runs, until rollcall takes them, and once more when it
   * stops. Before, one outage longer than `retryForMs` twice over left their items pending for good
   * unless a Worker started again within `recoverFailedWithinMs` (a review): the batch never
   * completed. Only transient failures: a `4xx` (a token refused) would be refused again.
   */
  const unrecorded = new Map<string, FailureAck>();
  let pause: NodeJS.Timeout | undefined;
  const pauseMs = Math.max(100, Math.min(UNRECORDED_PAUSE_MS, options.retryForMs ?? UNRECORDED_PAUSE_MS));
  const sendAgainLater = (ack: FailureAck): boolean => {
    const key = `${ack.jobId}\u0000${ack.itemId}`;
    if (stopping.signal.aborted || (unrecorded.size >= UNRECORDED_KEPT && !unrecorded.has(key))) return false;
    unrecorded.set(key, ack);
    // Not keeping the process alive: a Worker closed and left to end goes; its next watch looks back.
    pause ??= setTimeout(() => {
      pause = undefined;
      const again = [...unrecorded.values()];
      unrecorded.clear();
      for (const each of again) send(each, false);
    }, pauseMs).unref();
    return true;
  };
  /** Acks a run's failure, reporting what it cannot record: at its first try, and when it is given up after that. */
  const send = (ack: FailureAck, first: boolean): void => {
    // The process stays until this is answered: the job will not run again, and a process left to
    // end after `worker.close()` would otherwise drop it in a pause between tries (its item pending
    // until a watch's look-back, if one comes).
    keepingProcessAlive(sendAck(ack)).then(
      (rejected) => {
        if (rejected !== null && rejected !== 'batch_cancelled') report(`rollcall rejected the failure of job ${ack.jobId} (item ${ack.itemId}): ${rejected}`);
      },
      (thrown: unknown) => {
        const kept = isTransient(thrown) && sendAgainLater(ack);
        const why = asError(thrown).message;
        if (first)
          report(
            `the failure watch could not record the failure of job ${ack.jobId}: ${why}${kept ? '; it is sent again after a pause while the watch runs' : ''}`,
            thrown,
          );
        else if (!kept)
          report(`the failure of job ${ack.jobId} (item ${ack.itemId}) was not recorded before the failure watch stopped, or kept no more: ${why}`, thrown);
      },
    );
  };
  const record = (job: Job, error: Error): void => {
    // BullMQ sets `finishedOn` only when it moves the job to failed; a job it retries has none.
    if (typeof job.finishedOn !== 'number') return;
    // A sandboxed run marks its own copy of the job, not this one: its rejected success is told by its reason.
    if (ANSWERED_RUNS.has(job) || notForTheWatch(job)) return;
    let ack: FailureAck | undefined;
    try {
      ack = ackOf(job, failureMessageOf(error));
    } catch (thrown) {
      return report(`the failure watch could not record the failure of job ${job.id}: ${asError(thrown).message}`, thrown);
    }
    // Most likely the processor reads its item IDs elsewhere (its own itemIdOf) than this watch does.
    if (ack) return send(ack, true);
    if (!reportedNoItemId)
      report(
        `job ${job.id} failed for good, and the failure watch found no rollcall item ID in it (does it read them as the processor does?); later such jobs are not reported`,
      );
    reportedNoItemId = true;
  };
  // BullMQ calls this inside its own failure handling, after the job was moved: whatever goes wrong
  // here (a user's `itemIdOf` that throws) is reported, never thrown back into BullMQ.
  const onFailed: FailedListener = (job, error) => {
    if (job) record(job, error);
  };
  worker.on('failed', onFailed);
  const within = options.recoverFailedWithinMs ?? RECOVER_FAILED_WITHIN_MS;
  const recovery =
    within > 0
      ? recoverFailures(worker, Date.now() - within, stopping.signal, (job) => recordAgain(job)).then(
          (failures) => {
            // A throwing callback must not become an unhandled rejection.
            if (failures !== undefined && !stopping.signal.aborted) {
              try {
                options.onRecovered?.(failures);
              } catch (thrown) {
                report(`the failure watch's onRecovered threw: ${asError(thrown).message}`, thrown);
              }
            }
          },
          (error: unknown) => report(`the failure watch could not record the queue's recent failures again: ${asError(error).message}`, error),
        )
      : Promise.resolve();
  const stop = async (): Promise<void> => {
    worker.off('failed', onFailed);
    stopping.abort();
    clearTimeout(pause);
    // Those waiting for their next try go once more: what still fails is reported, not dropped unsaid.
    const left = [...unrecorded.values()];
    unrecorded.clear();
    for (const ack of left) send(ack, false);
    await recovery;
    await acks.drain();
  };
  WATCHES.set(worker, stop);
  return stop;
}

/**
 * Acks again the jobs the Worker's queue failed for good since `since` (newest first, at most
 * RECOVERY_LIMIT), a page at a time (recentFailuresOf: none skipped while others change the failed
 * set), and within a page one reason (one call) at a time: a start
 * neither holds the whole failed set nor sends a call per job at once. It reads through a Queue of
 * its own on the Worker's connection and backend (a Redis instance given is shared, not closed; the
 * queue's settings in Redis are left as they are). Failures seen both here and by the listener are
 * acked twice, as duplicates: no clock is trusted to split them. Refusals are no news here (a batch
 * deleted since); an ack that could not be sent ends it. `stopped` ends it at once, Redis down or not.
 */
async function recoverFailures(worker: WatchableWorker, since: number, stopped: AbortSignal, ack: (job: Job) => Promise<unknown>): Promise<number | undefined> {
  if (typeof worker.name !== 'string' || !worker.opts?.connection) return 0;
  const options = { connection: worker.opts.connection, prefix: worker.opts.prefix, skipMetasUpdate: true } as QueueOptions;
  const queue = new Queue(worker.name, options, (worker as { backendFactory?: never }).backendFactory);
  queue.on('error', () => undefined); // a lost connection also fails the read below, which reports it
  const untilStopped = <T>(work: Promise<T>): Promise<T> => unlessAborted(work, stopped);
  let recovered = 0;
  try {
    const failedSet: FailedSet<Job> = {
      idsAt: (start, end) => untilStopped(queue.getRanges(['failed'], start, end, false)),
      jobsOf: (ids) => untilStopped(Promise.all(ids.map((id) => queue.getJob(id) as Promise<Job | undefined>))),
    };
    for await (const recent of recentFailuresOf(failedSet, since)) {
      for (const sameReason of byReason(recent.slice(0, RECOVERY_LIMIT - recovered))) {
        await untilStopped(Promise.all(sameReason.map(ack)));
        recovered += sameReason.length;
      }
      if (recovered >= RECOVERY_LIMIT) break;
    }
    return recovered;
  } catch (error) {
    if (!stopped.aborted) throw error;
    return undefined;
  } finally {
    await closeLookBackQueue(queue, worker.opts.connection, stopped, untilStopped);
  }
}

/** Method names of a Redis client (ioredis, node-redis, Valkey GLIDE) that options never carry. */
const CLIENT_METHODS = ['connect', 'disconnect', 'duplicate', 'quit', 'close', 'sendCommand'];

/** Whether BullMQ was given a client of the user's (shared: never closed here) rather than options. */
function isClientInstance(connection: unknown): boolean {
  const methods = connection as Record<string, unknown>;
  return CLIENT_METHODS.some((name) => typeof methods[name] === 'function');
}

/**
 * Closes the look-back's queue, and drops its connection once the watch is stopped. BullMQ's close
 * sends QUIT and waits for the answer with no time limit, so a stop does not wait for it (a Redis
 * out of reach, or a connection gone silent mid-read); and a connection only closed that way stays
 * open until Redis answers or TCP gives up, which kept a stopped Worker's process alive. Dropped,
 * ioredis ends the socket within its `disconnectTimeout` (2 s by default). A client the user gave
 * BullMQ is shared: left as it is.
 */
async function closeLookBackQueue(queue: Queue, connection: unknown, stopped: AbortSignal, untilStopped: <T>(work: Promise<T>) => Promise<T>): Promise<void> {
  const closing = queue.close().catch(() => undefined);
  const drop = () => {
    if (!isClientInstance(connection)) queue.disconnect().catch(() => undefined);
  };
  if (stopped.aborted) return drop();
  stopped.addEventListener('abort', drop, { once: true });
  try {
    await untilStopped(closing);
  } catch {
    // stopped while closing: dropped in the background
  } finally {
    stopped.removeEventListener('abort', drop);
  }
}

/**
 * Jobs grouped by what their acks carry, failure reason or success: the acks of one group travel in
 * one call. Successes whose ack was not taken each name their item in their reason, and carry none.
 */
function byReason(jobs: Job[]): Job[][] {
  const groups = new Map<string, Job[]>();
  for (const job of jobs) {
    const key = outcomeOf(job) === 'succeeded' ? SUCCESS_UNRECORDED : job.failedReason;
    const group = groups.get(key);
    if (group) group.push(job);
    else groups.set(key, [job]);
  }
  return [...groups.values()];
}

/** Starts the watch of the Worker running `job`, once: none for a sandboxed job, which carries no Worker. */
export function watchWorkerOf<DataType, ResultType, NameType extends string>(
  client: RollcallClient,
  job: Job<DataType, ResultType, NameType>,
  options: FailureWatchOptions<DataType, ResultType, NameType>,
): void {
  // BullMQ makes a Worker's jobs with the Worker as their `queue` (worker.ts `createJob`).
  const worker = (job as unknown as { queue?: unknown }).queue;
  if (typeof worker !== 'object' || worker === null || WATCHES.has(worker) || !isWatchable(worker)) return;
  // Too late to recover failures from before the Worker started, and other Workers' would be acked
  // again by each Worker's first job: only a watch started with the Worker looks back.
  watchFailedJobs(client, worker, { ...options, recoverFailedWithinMs: 0 });
}
