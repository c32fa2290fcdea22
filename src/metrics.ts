import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

import { type Db, poolsStats } from './store/db';

/**
 * Every metric rollcall exports, on a registry of its own (so several apps in one process, as in
 * tests, do not collide). Names start with `rollcall_`.
 */
export class Metrics {
  readonly registry = new Registry();

  readonly httpRequests = new Counter({
    name: 'rollcall_http_requests_total',
    help: 'HTTP requests by route and status',
    labelNames: ['method', 'route', 'status'],
    registers: [this.registry],
  });
  readonly httpDuration = new Histogram({
    name: 'rollcall_http_request_duration_seconds',
    help: 'HTTP request latency by route and status',
    labelNames: ['method', 'route', 'status'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60],
    registers: [this.registry],
  });
  readonly ackedItems = new Counter({
    name: 'rollcall_ack_items_total',
    help: 'Item IDs received in acks, by outcome asked for and what became of them',
    labelNames: ['outcome', 'result'],
    registers: [this.registry],
  });
  readonly batchEvents = new Counter({
    name: 'rollcall_batches_total',
    help: 'Batches opened, sealed, completed and cancelled',
    labelNames: ['event'],
    registers: [this.registry],
  });
  readonly groupCommitCalls = new Histogram({
    name: 'rollcall_group_commit_calls',
    help: 'Ack calls merged into one transaction',
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    registers: [this.registry],
  });
  readonly groupCommitIds = new Histogram({
    name: 'rollcall_group_commit_ids',
    help: 'Item IDs in one merged ack transaction',
    buckets: [1, 10, 100, 1000, 5000, 10000, 20000, 50000],
    registers: [this.registry],
  });
  readonly transactionRetries = new Counter({
    name: 'rollcall_transaction_retries_total',
    help: 'Transactions run again after the database aborted them (a deadlock, a serialization failure, a Galera certification conflict); a lock-wait timeout is not run again',
    registers: [this.registry],
  });
  readonly sweptBatches = new Counter({ name: 'rollcall_sweeper_batches_removed_total', help: 'Batches removed by the sweeper', registers: [this.registry] });
  readonly sweptGroups = new Counter({ name: 'rollcall_sweeper_groups_removed_total', help: 'Group rows removed by the sweeper', registers: [this.registry] });
  readonly sweeps = new Counter({ name: 'rollcall_sweeper_runs_total', help: 'Sweeps run', registers: [this.registry] });
  readonly callbacks = new Counter({
    name: 'rollcall_callback_deliveries_total',
    help: 'Callback attempts by result (delivered, failed = will retry, dead = given up, unrecorded = its outcome was not written: another replica claimed the event, the claim outlasted its lease, or the write failed)',
    labelNames: ['result'],
    registers: [this.registry],
  });

  constructor(db: Db) {
    collectDefaultMetrics({ register: this.registry, prefix: 'rollcall_' });
    // Each result's series from the start, at 0: an alert on dead deliveries "increasing" sees the first one.
    for (const result of ['delivered', 'failed', 'dead', 'unrecorded']) this.callbacks.inc({ result }, 0);
    new Gauge({
      name: 'rollcall_db_pool_connections',
      help: "Database pool connections by state, of each pool (main; on MySQL/MariaDB also ack, the ack transactions' own)",
      labelNames: ['state', 'pool'],
      registers: [this.registry],
      collect() {
        for (const { pool, stats } of poolsStats(db)) {
          this.set({ state: 'used', pool }, stats.used);
          this.set({ state: 'free', pool }, stats.free);
          this.set({ state: 'pending_acquire', pool }, stats.pendingAcquires);
        }
      },
    });
  }

  /** Reports how many long-polls this process holds, as `rollcall_waits_held`. */
  countWaits(held: () => number): void {
    new Gauge({
      name: 'rollcall_waits_held',
      help: 'Long-polls (GET /v1/batches/:id/wait) this process holds now; WAIT_MAX bounds them',
      registers: [this.registry],
      collect() {
        this.set(held());
      },
    });
  }
}
