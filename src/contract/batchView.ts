import { batchOutcome, BatchRecord } from '../domain/batch';
import { BatchView } from './responses';

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/** A batch as the HTTP contract (and the callback body) shows it: times in ISO 8601, counts with pending. */
export function toBatchView(batch: BatchRecord): BatchView {
  return {
    id: batch.id,
    state: batch.state,
    outcome: batchOutcome(batch),
    userKey: batch.userKey,
    metadata: batch.metadata,
    callbackUrl: batch.callbackUrl,
    total: batch.total,
    succeeded: batch.succeeded,
    failed: batch.failed,
    pending: batch.total - batch.succeeded - batch.failed,
    createdAt: iso(batch.createdAt) as string,
    updatedAt: iso(batch.updatedAt) as string,
    sealedAt: iso(batch.sealedAt),
    completedAt: iso(batch.completedAt),
    cancelledAt: iso(batch.cancelledAt),
    parentItem: batch.parentItem,
  };
}
