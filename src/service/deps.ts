import type { Logger } from 'pino';

import type { BatchRecord } from '../domain/batch';
import type { CallbackTargetPolicy } from '../domain/callbackTarget';
import type { Db } from '../store/db';
import type { TransactionOptions } from '../store/transaction';
import type { TenantQuota } from './tenantQuota';

/**
 * What became of a callback attempt. `unrecorded`: its outcome was not written (another replica
 * claimed the event, nothing was sent because the claim outlasted its lease, or the write failed);
 * another attempt, here or on another replica, sends the event or already has.
 */
export type DeliveryResult = 'delivered' | 'failed' | 'dead' | 'unrecorded';

/** What use cases report as it happens (metrics listen here; use cases know nothing of them). */
export interface Observer {
  batchOpened(): void;
  batchSealed(): void;
  batchesCompleted(count: number): void;
  batchCancelled(): void;
  ackResult(outcome: string, acked: number, duplicates: number, rejected: number): void;
  delivery(result: DeliveryResult): void;
}

/** What every use case needs: the database, the clock and the few settings that shape behaviour. */
export interface ServiceDeps {
  db: Db;
  now: () => number;
  groupSize: number;
  /** Where callbacks may point (checked at create for literal addresses, and at every connect). */
  callbackTargets: CallbackTargetPolicy;
  /** Failure reasons kept per batch (FAILURE_REASONS_PER_BATCH); more are only counted as dropped. */
  failureReasonsPerBatch: number;
  tx: TransactionOptions;
  /** Each tenant's quota of unfinished batches and items; null when neither is limited. */
  quota: TenantQuota | null;
  log: Logger;
  observe: Observer;
  /** Called after a transaction that completed (or cancelled) batches has committed. */
  onCompleted?: (batches: BatchRecord[]) => void;
}
