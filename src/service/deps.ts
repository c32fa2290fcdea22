import type { Logger } from 'pino';
import type { BatchRecord } from '../domain/batch';
import type { Db } from '../store/db';
import type { TransactionOptions } from '../store/transaction';

/** What every use case needs: the database, the clock and the few settings that shape behaviour. */
export interface ServiceDeps {
  db: Db;
  now: () => number;
  groupSize: number;
  tx: TransactionOptions;
  log: Logger;
  /** Called after a transaction that completed batches has committed. */
  onCompleted?: (batches: BatchRecord[]) => void;
}
