import { UnavailableError } from '../domain/errors';
import { Db, queryTimeoutOf, unlessTheDatabaseFreezes, withoutQueryTimeout } from '../store/db';
import { deleteBatchesWithGroups, lockDueBatches, sweepShapeOf } from '../store/removeBatches';
import { inTransaction } from '../store/transaction';
import { ServiceDeps } from './deps';
import { reading } from './reading';

export interface SweepOptions {
  /** Batches not complete with no add, seal or ack for this long are removed. */
  openBatchTtlMs: number;
  /** Complete batches are kept (readable) this long after completing. */
  completedRetentionMs: number;
  /** Batches removed per transaction, so acks are never blocked for long. */
  chunk: number;
  /** Of those, as many as hold this many group and failure-reason rows together (one at least; default no bound): lockDueBatches. */
  chunkRows?: number;
  /** A sweep ends once it has passed over this many candidates (default MAX_PASSED_OVER). */
  maxPassedOver?: number;
  /** Asked before each chunk: true ends the sweep there (a shutdown), the rest left to the next. */
  stopped?: () => boolean;
  /**
   * Told of each chunk once it has committed: a sweep that fails later, or is given up, has still
   * removed those (its result never comes, and the metrics missed them).
   */
  removed?: (chunk: SweepResult) => void;
  /**
   * Where the database is asked whether it still answers while the sweep runs (default: the
   * service's pool): the readiness probe's pool. On the service's own pool a ping waited for a free
   * connection, and a pool busy for DB_QUERY_TIMEOUT (acks queued behind a batch held elsewhere)
   * was taken for a database that answered nothing: the sweep was given up, and none started for
   * STUCK_SWEEP_LIMITS times that.
   */
  watchedThrough?: Db;
}

/** Candidates one sweep may pass over before it ends, leaving the rest to the next. */
export const MAX_PASSED_OVER = 10_000;

export interface SweepResult {
  batchesRemoved: number;
  groupsRemoved: number;
}

/**
 * Per service, the sweeps whose callers the freeze watch answered while their statements still
 * waited on the database, with when each was given up: each stops after the chunk it is in. For
 * STUCK_SWEEP_LIMITS times DB_QUERY_TIMEOUT after the newest was given up no sweep starts (a 503 at
 * once), nor while MOST_LEFT_RUNNING are left. Before, the next sweep (the loop's, or POST
 * /v1/admin/sweep) started beside it, on a connection more, and sweeps stacked up for as long as the
 * database stayed frozen. Past that time one starts anyway: a statement whose answer was lost in a
 * partition waits until TCP keepalive finds its connection dead (minutes), and retention must not.
 */
const leftRunning = new WeakMap<ServiceDeps, Set<{ since: number }>>();
const STUCK_SWEEP_LIMITS = 3;
const MOST_LEFT_RUNNING = 2;

function mayStart(deps: ServiceDeps): boolean {
  const left = leftRunning.get(deps);
  if (!left || left.size === 0) return true;
  const newest = Math.max(...[...left].map((entry) => entry.since));
  return left.size < MOST_LEFT_RUNNING && performance.now() - newest >= STUCK_SWEEP_LIMITS * queryTimeoutOf(deps.db);
}

function leaveRunning(deps: ServiceDeps, settled: Promise<void>): void {
  const left = leftRunning.get(deps) ?? new Set();
  leftRunning.set(deps, left);
  const entry = { since: performance.now() };
  left.add(entry);
  void settled.then(() => left.delete(entry));
}

/**
 * Removes every batch due now, in chunks of `chunk` batches, each chunk its own short transaction.
 * Replicas sweeping at once skip each other's rows (SKIP LOCKED), so no work is done twice; each
 * goes on until it finds nothing left that it can lock, or has passed over MAX_PASSED_OVER candidates. Its statements have no DB_QUERY_TIMEOUT: a
 * chunk's delete is as long as its batches are large (1.5M group rows took 4–5 s), and one cut off
 * at the limit was rolled back and chosen again at every sweep, so nothing was ever removed. A
 * database that answers nothing at all for DB_QUERY_TIMEOUT still ends it for its caller
 * (UnavailableError); the sweep itself stops after the chunk it is in (leftRunning).
 */
export async function sweepOnce(deps: ServiceDeps, options: SweepOptions): Promise<SweepResult> {
  if (!mayStart(deps)) throw new UnavailableError('the last sweep, under which the database stopped answering, has not ended yet; none starts before it');
  let givenUp = false;
  let ended = false;
  const work = withoutQueryTimeout(deps.db, (db) => sweepChunks(deps, db, { ...options, stopped: () => givenUp || options.stopped?.() === true }), {
    keepIdleLimit: true,
  });
  // Registered before the freeze watch's race: a work that failed has set `ended` when the race ends.
  const settled = work.then(
    () => void (ended = true),
    () => void (ended = true),
  );
  try {
    return await unlessTheDatabaseFreezes(options.watchedThrough ?? deps.db, 'a sweep ran', () => work);
  } catch (error) {
    if (!ended) {
      givenUp = true;
      leaveRunning(deps, settled);
    }
    throw error;
  }
}

async function sweepChunks(deps: ServiceDeps, db: Db, options: SweepOptions): Promise<SweepResult> {
  const total: SweepResult = { batchesRemoved: 0, groupsRemoved: 0 };
  // Candidates a chunk could not take (an ack or another replica's sweep held them, or an ack made
  // them no longer due): later chunks look past them. Were they looked at again, a chunk whose
  // candidates were all held would remove nothing and end the sweep with due batches behind them.
  const passedOver = new Set<string>();
  const shape = await reading(() => sweepShapeOf(deps.db));
  for (;;) {
    if (options.stopped?.()) return total;
    const now = deps.now();
    const cutoffs = { idleBefore: now - options.openBatchTtlMs, completedBefore: now - options.completedRetentionMs };
    const chunk = await inTransaction(db, deps.tx, async (trx) => {
      const due = await lockDueBatches(trx, cutoffs, options.chunk, passedOver, shape, options.chunkRows);
      return { ...due, groups: await deleteBatchesWithGroups(trx, due.locked) };
    });
    total.batchesRemoved += chunk.locked.length;
    total.groupsRemoved += chunk.groups;
    options.removed?.({ batchesRemoved: chunk.locked.length, groupsRemoved: chunk.groups });
    for (const id of chunk.passedOver) passedOver.add(id);
    // Each chunk removes a batch or passes one over for good, so this ends.
    if (chunk.locked.length === 0 && chunk.passedOver.length === 0) return total;
    // Replicas sweeping one backlog together pass over each other's chunks, half the backlog each:
    // the ids left out go in every candidate read, past what a statement may bind. The next sweep
    // starts afresh with the rest.
    if (passedOver.size >= (options.maxPassedOver ?? MAX_PASSED_OVER)) {
      deps.log.info(
        { passedOver: passedOver.size, ...total },
        'sweep ended after passing over its most candidates (held by acks or other sweeps); the next sweep carries on',
      );
      return total;
    }
  }
}
