/**
 * The failures BullMQ decides without running the processor: a job stalled more often than the
 * Worker's `maxStalledCount`, started more than its `maxStartedAttempts`, or a flow parent whose
 * child failed with `failParentOnFailure`, is failed for good by the Worker that next picks it up
 * (bullmq 5 and 6: `getUnrecoverableErrorMessage`), and only the Worker's `failed` event tells. This
 * watch acks their items `failed`, so their batches complete.
 */
import { Job, Queue, type QueueOptions } from 'bullmq';

import type { RollcallClient } from '../client';
import { AckCoalescingOptions, Rejected, sharedCoalescer } from './ackCoalescer';
import { asError, RollcallIntegrationError } from './errors';

export interface FailureWatchOptions<DataType, ResultType, NameType extends string> extends AckCoalescingOptions {
  /** Where a job's item ID is. Default: `job.data.rollcallItemId` (as the processor's). */
  itemIdOf?: (job: Job<DataType, ResultType, NameType>) => string | undefined;
  /**
   * At its start, `watchFailedJobs` acks `failed` again for the jobs the Worker's queue failed within
   * this many milliseconds before: a failure whose ack a crash cut off is recorded by the restarted
   * Worker's watch (what was recorded already counts as a duplicate). Default 15 minutes; 0: none.
   */
  recoverFailedWithinMs?: number;
}

/** How far back a watch's start looks for failures whose ack may have been lost, by default. */
const RECOVER_FAILED_WITHIN_MS = 15 * 60_000;

/** Failed jobs read per page while recovering. */
const RECOVERY_PAGE = 200;

type FailedListener = (job: Job | undefined, error: Error) => void;

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
 * What was thrown for failures rollcall has answered for (the item acked `failed`, or its ack
 * refused): the watch skips them, so an item is acked once. BullMQ hands the processor's thrown value
 * to the `failed` event unchanged in the Worker's own process (a sandbox's arrives as a copy: its
 * failures are then acked again, and count as duplicates).
 */
const ANSWERED_FAILURES = new WeakSet<object>();

/** Marks what the processor throws for a failure rollcall has answered for; returns it. */
export function answered<T>(thrown: T): T {
  if (typeof thrown === 'object' && thrown !== null) ANSWERED_FAILURES.add(thrown);
  return thrown;
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
 * The ack goes after BullMQ has failed the job: a process that ends within that call (a crash, an
 * exit right after `worker.close()` without awaiting the stop) leaves the item pending until the
 * next watch starts: each looks back `recoverFailedWithinMs` and acks the queue's failures of that
 * time again (recorded ones count as duplicates). What it
 * cannot record (rollcall refused it, or could not be reached after the retries) is reported on the
 * Worker's `error` event (code `failure_unrecorded`), or as a process warning when it has no listener.
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
  const itemIdOf = (options.itemIdOf ?? defaultItemIdOf) as (job: Job) => string | undefined;
  const report = (message: string, cause?: unknown): void => {
    const error = new RollcallIntegrationError('failure_unrecorded', message, { cause });
    // An `error` listener that throws must not reach BullMQ, nor become an unhandled rejection.
    try {
      if (worker.listenerCount('error') > 0) worker.emit('error', error);
      else process.emitWarning(error);
    } catch {
      process.emitWarning(error);
    }
  };
  /** Acks job's item `failed`: what rollcall answered, or why it could not be asked. */
  const ackFailure = async (job: Job, reason: string): Promise<{ itemId?: string; rejected: Rejected }> => {
    const itemId = itemIdOf(job);
    if (typeof itemId !== 'string' || !itemId) return { rejected: null };
    return { itemId, rejected: await acks.ack(itemId, 'failed', reason) };
  };
  const record = (job: Job, error: Error): void => {
    // BullMQ sets `finishedOn` only when it moves the job to failed; a job it retries has none.
    if (typeof job.finishedOn !== 'number') return;
    if (typeof error === 'object' && error !== null && ANSWERED_FAILURES.has(error)) return;
    ackFailure(job, typeof error?.message === 'string' ? error.message : String(error)).then(
      ({ itemId, rejected }) => {
        if (rejected !== null && rejected !== 'batch_cancelled') report(`rollcall rejected the failure of job ${job.id} (item ${itemId}): ${rejected}`);
      },
      (thrown: unknown) => report(`the failure watch could not record the failure of job ${job.id}: ${asError(thrown).message}`, thrown),
    );
  };
  // BullMQ calls this inside its own failure handling, after the job was moved: whatever goes wrong
  // here (a user's `itemIdOf` that throws) is reported, never thrown back into BullMQ.
  const onFailed: FailedListener = (job, error) => {
    if (job) record(job, error);
  };
  worker.on('failed', onFailed);
  // Failures from before this moment were not seen by the listener; later ones are.
  const within = options.recoverFailedWithinMs ?? RECOVER_FAILED_WITHIN_MS;
  const until = Date.now();
  const recovery =
    within > 0
      ? recoverFailures(worker, until - within, until, (job) => ackFailure(job, job.failedReason)).catch((error: unknown) =>
          report(`the failure watch could not record the queue's recent failures again: ${asError(error).message}`, error),
        )
      : Promise.resolve();
  const stop = async (): Promise<void> => {
    worker.off('failed', onFailed);
    await recovery;
    await acks.drain();
  };
  WATCHES.set(worker, stop);
  return stop;
}

/**
 * Acks again the jobs the Worker's queue failed for good between `since` and `until` (newest first,
 * in pages), through a Queue of its own on the Worker's connection (a Redis instance given is shared,
 * not closed). None for a Worker that does not tell its queue. Refusals are no news here (a batch
 * since deleted); acks that could not be sent fail it, once for all.
 */
async function recoverFailures(worker: WatchableWorker, since: number, until: number, ack: (job: Job) => Promise<unknown>): Promise<void> {
  if (typeof worker.name !== 'string' || !worker.opts?.connection) return;
  const queue = new Queue(worker.name, { connection: worker.opts.connection, prefix: worker.opts.prefix } as QueueOptions);
  queue.on('error', () => undefined); // a lost connection also fails the read below, which reports it
  const unsent: unknown[] = [];
  const acked: Array<Promise<unknown>> = [];
  try {
    pages: for (let start = 0; ; start += RECOVERY_PAGE) {
      const jobs = (await queue.getFailed(start, start + RECOVERY_PAGE - 1)) as Array<Job | undefined>;
      for (const job of jobs) {
        const finishedOn = job?.finishedOn;
        if (!job || typeof finishedOn !== 'number' || finishedOn >= until) continue;
        if (finishedOn < since) break pages;
        acked.push(
          Promise.resolve(job)
            .then(ack)
            .catch((error: unknown) => unsent.push(error)),
        );
      }
      if (jobs.length < RECOVERY_PAGE) break;
    }
  } finally {
    await Promise.all(acked);
    await queue.close();
  }
  if (unsent.length > 0) throw new Error(`${unsent.length} of them could not be acked (${asError(unsent[0]).message})`, { cause: unsent[0] });
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
