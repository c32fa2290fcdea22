import { v7 as uuidv7 } from 'uuid';

import { GroupRecord } from '../domain/ackPlan';
import { BatchRecord, Caller, groupSizes, MAX_GROUPS_PER_ADD, maxItemsPerAdd } from '../domain/batch';
import { BatchNotOpenError, IdempotencyConflictError, InvalidRequestError } from '../domain/errors';
import { AddAnswer, findAddRequest, insertAddRequest } from '../store/addRequests';
import { updateBatch } from '../store/batches';
import { insertGroups } from '../store/groups';
import { ServiceDeps } from './deps';
import { withLockedBatch } from './existingBatch';
import { reading } from './reading';
import { Reservation, settleFailed, TenantUsage } from './tenantQuota';

/**
 * Adds `count` items as new groups of at most GROUP_SIZE. Locks the batch row first (refusing
 * unless open), inserts the groups, bumps total and open_groups, all in one transaction. With an
 * Idempotency-Key, a repeat returns the first answer and adds nothing. The items are taken from the
 * tenant's quota (TENANT_MAX_ITEMS) once the add is known to write, so a repeat is never refused.
 * The tenant's usage is read only once the batch was found open and the add is not a known repeat,
 * so a 404, a 409 or a repeat never waits for it.
 */
export async function addItems(deps: ServiceDeps, caller: Caller, batchId: string, count: number, idempotencyKey?: string): Promise<AddAnswer> {
  let usage: TenantUsage | undefined;
  const readUsage = async (found: BatchRecord) => {
    if (!deps.quota || found.state !== 'open') return;
    // A repeat of a keyed add writes nothing, so it does not wait for (or fail with) a read due now;
    // asked only then, so a keyed add costs no read more while the usage is fresh.
    const due = !deps.quota.isFresh(caller.tenant);
    if (due && idempotencyKey !== undefined && (await reading(() => findAddRequest(deps.db, found.id, idempotencyKey)))) return;
    usage = await deps.quota.usage(caller.tenant);
  };
  let taken: Reservation | undefined;
  try {
    const answer = await withLockedBatch(
      deps,
      caller,
      batchId,
      async (trx, batch) => {
        taken?.release(); // a transaction run again after a deadlock takes again
        if (idempotencyKey !== undefined) {
          const earlier = await findAddRequest(trx, batch.id, idempotencyKey);
          if (earlier) {
            if (earlier.count !== count) throw new IdempotencyConflictError(idempotencyKey);
            return earlier.answer;
          }
        }
        if (batch.state !== 'open') throw new BatchNotOpenError(batch.id, batch.state);
        // The answer is kept for the key's repeats (MAX_GROUPS_PER_ADD); one without a key is not.
        if (idempotencyKey !== undefined && count > maxItemsPerAdd(deps.groupSize))
          throw new InvalidRequestError(
            `an add with an Idempotency-Key takes at most ${maxItemsPerAdd(deps.groupSize)} items here (${MAX_GROUPS_PER_ADD} groups of GROUP_SIZE ${deps.groupSize}); add them in several calls`,
          );
        // A batch is never opened again, so the read before found it open and read the usage.
        if (deps.quota) taken = deps.quota.take(usage ?? (await deps.quota.usage(caller.tenant)), { batches: 0, items: count });

        const groups: GroupRecord[] = groupSizes(count, deps.groupSize).map((size) => ({
          batchId: batch.id,
          id: uuidv7(),
          size,
          pending: size,
          succeededBits: null,
          failedBits: null,
        }));
        const now = deps.now();
        await insertGroups(trx, groups);
        await updateBatch(trx, { ...batch, total: batch.total + count, openGroups: batch.openGroups + groups.length, updatedAt: now });
        const answer: AddAnswer = { batchId: batch.id, total: batch.total + count, groups: groups.map((g) => ({ id: g.id, size: g.size })) };
        if (idempotencyKey !== undefined) await insertAddRequest(trx, idempotencyKey, count, answer, now);
        return answer;
      },
      readUsage,
    );
    taken?.commit();
    return answer;
  } catch (caught) {
    settleFailed(taken, caught);
    throw caught;
  }
}
