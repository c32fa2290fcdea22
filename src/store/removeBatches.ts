import { Knex } from 'knex';

import { forUpdateSkipLocked } from './dialect';

export interface SweepCutoffs {
  /** Batches not complete whose last activity is older than this are removed. */
  idleBefore: number;
  /** Complete batches that completed (and cancelled ones cancelled) before this are removed. */
  completedBefore: number;
}

/**
 * Locks up to `limit` batches that are due for removal, skipping any row another transaction holds
 * (an ack in flight, another replica's sweep): their locking read sees the newest committed
 * `updated_at`, so a batch that an ack has just touched is no longer due. A batch with a callback
 * event still pending is never due: retention waits for `delivered` or `dead`, whatever its value.
 * Three index range scans (idle, complete, cancelled), each checking the outbox by batch.
 */
export async function lockDueBatches(trx: Knex.Transaction, cutoffs: SweepCutoffs, limit: number): Promise<string[]> {
  const skipLocked = (q: Knex.QueryBuilder) => forUpdateSkipLocked(trx, q);
  const noPendingEvent = (q: Knex.QueryBuilder) =>
    q.whereNotExists(trx('outbox').select(trx.raw('1')).whereRaw('outbox.batch_id = batches.id').where('outbox.status', 'pending'));
  const idle = (await skipLocked(
    noPendingEvent(trx('batches').select('id').whereIn('state', ['open', 'sealed']).where('updated_at', '<', cutoffs.idleBefore).limit(limit)),
  )) as Array<{ id: string }>;
  const room = limit - idle.length;
  const old =
    room > 0
      ? ((await skipLocked(
          noPendingEvent(trx('batches').select('id').where('state', 'complete').where('completed_at', '<', cutoffs.completedBefore).limit(room)),
        )) as Array<{ id: string }>)
      : [];
  const roomLeft = limit - idle.length - old.length;
  const cancelled =
    roomLeft > 0
      ? ((await skipLocked(
          noPendingEvent(trx('batches').select('id').where('state', 'cancelled').where('cancelled_at', '<', cutoffs.completedBefore).limit(roomLeft)),
        )) as Array<{ id: string }>)
      : [];
  return [...idle, ...old, ...cancelled].map((r) => r.id);
}

/** Deletes the batches (rows this transaction holds) with their groups; returns the group count. */
export async function deleteBatchesWithGroups(trx: Knex.Transaction, batchIds: string[]): Promise<number> {
  if (batchIds.length === 0) return 0;
  const groups = await trx('item_groups').whereIn('batch_id', batchIds).delete();
  await trx('add_requests').whereIn('batch_id', batchIds).delete();
  await trx('failure_reasons').whereIn('batch_id', batchIds).delete();
  await trx('outbox').whereIn('batch_id', batchIds).delete();
  await trx('batches').whereIn('id', batchIds).delete();
  return groups;
}
