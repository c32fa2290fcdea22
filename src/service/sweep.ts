import { Db, withoutQueryTimeout } from '../store/db';
import { deleteBatchesWithGroups, lockDueBatches } from '../store/removeBatches';
import { inTransaction } from '../store/transaction';
import { ServiceDeps } from './deps';

export interface SweepOptions {
  /** Batches not complete with no add, seal or ack for this long are removed. */
  openBatchTtlMs: number;
  /** Complete batches are kept (readable) this long after completing. */
  completedRetentionMs: number;
  /** Batches removed per transaction, so acks are never blocked for long. */
  chunk: number;
}

export interface SweepResult {
  batchesRemoved: number;
  groupsRemoved: number;
}

/**
 * Removes every batch due now, in chunks of `chunk` batches, each chunk its own short transaction.
 * Replicas sweeping at once skip each other's rows (SKIP LOCKED), so no work is done twice; each
 * goes on until it finds nothing left that it can lock. Its statements have no DB_QUERY_TIMEOUT: a
 * chunk's delete is as long as its batches are large (1.5M group rows took 4–5 s), and one cut off
 * at the limit was rolled back and chosen again at every sweep, so nothing was ever removed.
 */
export function sweepOnce(deps: ServiceDeps, options: SweepOptions): Promise<SweepResult> {
  return withoutQueryTimeout(deps.db, (db) => sweepChunks(deps, db, options));
}

async function sweepChunks(deps: ServiceDeps, db: Db, options: SweepOptions): Promise<SweepResult> {
  const total: SweepResult = { batchesRemoved: 0, groupsRemoved: 0 };
  for (;;) {
    const now = deps.now();
    const cutoffs = { idleBefore: now - options.openBatchTtlMs, completedBefore: now - options.completedRetentionMs };
    const chunk = await inTransaction(db, deps.tx, async (trx) => {
      const ids = await lockDueBatches(trx, cutoffs, options.chunk);
      return { batches: ids.length, groups: await deleteBatchesWithGroups(trx, ids) };
    });
    total.batchesRemoved += chunk.batches;
    total.groupsRemoved += chunk.groups;
    // Not `< chunk`: a replica sweeping beside this one may hold some of the candidates, so a short
    // chunk does not mean nothing is left. Each chunk removes at least one batch, so this ends.
    if (chunk.batches === 0) return total;
  }
}
