import type { Express } from 'express';
import pino, { Logger } from 'pino';

import { Config } from './config';
import { AckCall } from './domain/ackCall';
import { BatchRecord } from './domain/batch';
import { CallbackTargetPolicy } from './domain/callbackTarget';
import { UnavailableError } from './domain/errors';
import { ShareLimits } from './domain/fairShare';
import { createApp } from './http/app';
import { isLoopback } from './http/hostCheck';
import { tenantRateLimiter } from './http/rateLimit';
import { Metrics } from './metrics';
import { AckCommitter } from './service/ackCommitter';
import { ackItems } from './service/ackItems';
import { BatchOwners } from './service/batchOwners';
import { CallbackDispatcher, DeliveryOptions } from './service/callbackDispatcher';
import { ChildOutcomeDispatcher } from './service/childOutcomeDispatcher';
import { CompletionWatcher, WaitLimits } from './service/completionWatcher';
import { ServiceDeps } from './service/deps';
import { oneAtATime } from './service/oneAtATime';
import { PeriodicTask } from './service/periodic';
import { callbackPoster, PostCallback } from './service/postCallback';
import { sweepOnce, SweepResult } from './service/sweep';
import { TenantQuota } from './service/tenantQuota';
import { Db, openDb, probePool, writerSlots } from './store/db';
import { migrateLatest } from './store/migrations';

/** The service wired together: database, use cases, HTTP app, background loops. */
export interface Rollcall {
  app: Express;
  deps: ServiceDeps;
  db: Db;
  log: Logger;
  metrics: Metrics;
  dispatcher: CallbackDispatcher;
  /** Acks parent items for finished child batches. */
  childOutcomes: ChildOutcomeDispatcher;
  watcher: CompletionWatcher;
  /** The group committer for acks; null when ACK_GROUP_COMMIT=off. */
  committer: AckCommitter | null;
  /** One sweep now (what the sweeper loop and POST /v1/admin/sweep run). */
  sweep(): Promise<SweepResult>;
  /** Starts the sweeper and callback loops (main.ts does; tests drive them by hand). */
  startBackground(): void;
  /**
   * The drain's start (SIGTERM): answers every wait now and any later one at once, and ends sweeps
   * and the child-outcome loop after the chunk or round under way; no sweep and no callback
   * attempt starts after it (those under way get their grace in close()).
   */
  beginShutdown(): void;
  /** Stops loops, answers queued acks, closes the pool. */
  close(): Promise<void>;
}

export interface RollcallOptions {
  /** Clock for every use case; tests pass their own instead of sleeping. */
  now?: () => number;
  log?: Logger;
  /** How callbacks are sent (default: node's http/https under the callback target policy). */
  postCallback?: PostCallback;
}

/** Opens the database, applies migrations and builds the app. Does not listen. */
export async function createRollcall(config: Config, options: RollcallOptions = {}): Promise<Rollcall> {
  const log = options.log ?? pino({ level: config.LOG_LEVEL });
  const db = await openMigrated(config, log);
  const probes = probePool(db);
  const metrics = new Metrics(db);
  const completionListeners: CompletionListener[] = [];
  const deps = serviceDeps(config, db, log, metrics, options.now ?? Date.now, completionListeners);
  const watcher = new CompletionWatcher(deps, config.WAIT_POLL_INTERVAL, waitLimits(config));
  metrics.countWaits(() => watcher.holding);
  const loops = backgroundLoops(config, deps, metrics, probes.db, options.postCallback);
  completionListeners.push((batches) => watcher.notify(batches), loops.onCompleted);
  // With several tenants, calls naming another tenant's batch leave its row alone (batchOwners.ts).
  const owners = tenantsOf(config) > 1 ? new BatchOwners(deps) : null;
  const committer = ackCommitter(config, deps, metrics, owners);
  const submitAck = committer
    ? (call: AckCall) => committer.submit(call)
    : async (call: AckCall) => {
        await owners?.screen(call);
        return (await ackItems(deps, [call]))[0]!;
      };
  const tenantRate = config.TENANT_RATE_LIMIT ? tenantRateLimiter({ requests: config.TENANT_RATE_LIMIT, windowMs: config.TENANT_RATE_WINDOW }) : null;
  const app = createApp({
    service: deps,
    probes,
    submitAck,
    bodyLimit: config.BODY_LIMIT,
    log,
    watcher,
    sweepNow: loops.sweep,
    tokens: config.tokens,
    tenantRate: tenantRate?.handler ?? null,
    metrics,
    publicMetrics: config.PUBLIC_METRICS === 'on',
    publicOpenapi: config.PUBLIC_OPENAPI === 'on',
    hostCheck: config.tokens ? null : { boundToLoopback: isLoopback(config.HOST), allowed: config.ALLOWED_HOSTS },
  });
  return {
    app,
    deps,
    db,
    log,
    metrics,
    dispatcher: loops.dispatcher,
    childOutcomes: loops.childOutcomes,
    watcher,
    committer,
    sweep: loops.sweep,
    startBackground: () => loops.start(),
    beginShutdown() {
      watcher.release();
      loops.beginStop();
    },
    async close() {
      watcher.close();
      tenantRate?.close();
      try {
        try {
          await loops.stop();
          await committer?.drain();
        } finally {
          await db.destroy();
        }
      } finally {
        await probes.close();
      }
    },
  };
}

type CompletionListener = (batches: BatchRecord[]) => void;

/** Opens the database and applies pending migrations (closing it again when they fail). */
async function openMigrated(config: Config, log: Logger): Promise<Db> {
  const db = openDb(config, log);
  try {
    const applied = await migrateLatest(db);
    if (applied.length > 0) log.info({ applied }, 'migrations applied');
    return db;
  } catch (error) {
    await db.destroy();
    throw error;
  }
}

/** What every use case gets: the database, clock, limits, and the metrics they report to. */
function serviceDeps(config: Config, db: Db, log: Logger, metrics: Metrics, now: () => number, listeners: CompletionListener[]): ServiceDeps {
  return {
    db,
    log,
    now,
    groupSize: config.GROUP_SIZE,
    callbackTargets: new CallbackTargetPolicy(config.tokens !== null, config.CALLBACK_ALLOW_HOSTS),
    failureReasonsPerBatch: config.FAILURE_REASONS_PER_BATCH,
    quota: tenantQuota(config, db),
    tx: {
      retries: config.TX_RETRIES,
      lockTimeoutMs: config.LOCK_TIMEOUT,
      onRetry: (err, attempt) => {
        metrics.transactionRetries.inc();
        log.debug({ err, attempt }, 'transaction retried');
      },
    },
    observe: {
      batchOpened: () => metrics.batchEvents.inc({ event: 'opened' }),
      batchSealed: () => metrics.batchEvents.inc({ event: 'sealed' }),
      batchesCompleted: (n) => metrics.batchEvents.inc({ event: 'completed' }, n),
      batchCancelled: () => metrics.batchEvents.inc({ event: 'cancelled' }),
      ackResult(outcome, acked, duplicates, rejected) {
        if (acked) metrics.ackedItems.inc({ outcome, result: 'acked' }, acked);
        if (duplicates) metrics.ackedItems.inc({ outcome, result: 'duplicate' }, duplicates);
        if (rejected) metrics.ackedItems.inc({ outcome, result: 'rejected' }, rejected);
      },
      delivery: (result) => metrics.callbacks.inc({ result }),
    },
    // Listeners are registered once the parts that listen exist (the watcher, the loops).
    onCompleted: (batches) => listeners.forEach((listen) => listen(batches)),
  };
}

/** The callback, child-outcome and sweeper loops, woken early by completions. */
function backgroundLoops(config: Config, deps: ServiceDeps, metrics: Metrics, probeDb: Db, postCallback?: PostCallback) {
  const { log } = deps;
  const dispatcher = new CallbackDispatcher(deps, deliveryOptions(config), postCallback ?? callbackPoster(deps.callbackTargets, config.CALLBACK_DNS_SERVERS));
  const delivering = new PeriodicTask('callbacks', config.CALLBACK_POLL_INTERVAL, () => dispatcher.startDue(), log);
  dispatcher.onSlotFreed = () => delivering.wake();
  const parkingHeld = new PeriodicTask('held callbacks', config.CALLBACK_POLL_INTERVAL, () => dispatcher.parkHeld(), log);
  const childOutcomes = new ChildOutcomeDispatcher(deps);
  const ackingParents = new PeriodicTask('child outcomes', config.CALLBACK_POLL_INTERVAL, () => childOutcomes.deliverDue(), log);
  let stopping = false;
  // One sweep at a time in this process, whoever asks (the loop, POST /v1/admin/sweep): each runs
  // on a connection of its own outside the pool, so 200 admin calls at once took 200 connections.
  // From the shutdown's start none begins, and the one under way ends after its chunk: a sweep of a
  // backlog, or one that waited behind another, held the shutdown past its time.
  const sweep = oneAtATime(async (): Promise<SweepResult> => {
    if (stopping) throw new UnavailableError('the service is shutting down; no sweep starts now');
    const removed = await sweepOnce(deps, {
      openBatchTtlMs: config.OPEN_BATCH_TTL,
      completedRetentionMs: config.COMPLETED_RETENTION,
      chunk: config.SWEEP_CHUNK,
      chunkRows: config.SWEEP_CHUNK_ROWS,
      stopped: () => stopping,
      watchedThrough: probeDb,
      removed: (chunk) => {
        metrics.sweptBatches.inc(chunk.batchesRemoved);
        metrics.sweptGroups.inc(chunk.groupsRemoved);
      },
    });
    metrics.sweeps.inc();
    return removed;
  });
  // From the shutdown's start no callback attempt begins: one begun during the HTTP drain was cut
  // off a second into close() (settle) and sent again by another replica, a duplicate per deploy.
  // Those under way go on; close() gives them their grace.
  const beginStop = () => {
    stopping = true;
    childOutcomes.stop();
    void delivering.stop();
    void parkingHeld.stop();
  };
  const sweeping = new PeriodicTask(
    'sweeper',
    config.SWEEP_INTERVAL,
    async () => {
      if (stopping) return; // a tick between the shutdown's start and the loops' stop: no warning of a sweep refused
      const removed = await sweep();
      if (removed.batchesRemoved > 0) log.info(removed, 'swept batches');
    },
    log,
  );
  return {
    dispatcher,
    childOutcomes,
    sweep,
    onCompleted(batches: BatchRecord[]) {
      if (batches.some((b) => b.callbackUrl)) delivering.wake();
      if (batches.some((b) => b.parentItem)) ackingParents.wake();
    },
    start() {
      delivering.start();
      parkingHeld.start();
      ackingParents.start();
      if (config.SWEEP_INTERVAL > 0) sweeping.start();
    },
    beginStop,
    async stop() {
      beginStop();
      // The callbacks' grace runs beside the others' ends, not after them.
      await Promise.all([delivering.stop().then(() => dispatcher.settle()), parkingHeld.stop(), ackingParents.stop(), sweeping.stop()]);
    },
  };
}

/** The group committer for acks, or null when ACK_GROUP_COMMIT=off. */
function ackCommitter(config: Config, deps: ServiceDeps, metrics: Metrics, owners: BatchOwners | null): AckCommitter | null {
  if (config.ACK_GROUP_COMMIT !== 'on') return null;
  const writers = writerSlots(deps.db);
  const options = {
    windowMs: config.ACK_GROUP_COMMIT_WINDOW_MS,
    // One writer slot is SQLite (or a pool of one): its rounds run in-process and let no request in
    // meanwhile, so calls meet only within the window. On a pool, calls gather behind a running round.
    waitWhenIdle: writers === 1,
    maxIds: config.ACK_GROUP_COMMIT_MAX_IDS,
    concurrency: Math.min(config.ACK_GROUP_COMMIT_CONCURRENCY, writers),
    maxQueuedIds: config.ACK_QUEUE_MAX_IDS,
    // With several tenants, one may hold at most half: the other half stays for the rest.
    maxQueuedIdsPerTenant: tenantsOf(config) > 1 ? Math.floor(config.ACK_QUEUE_MAX_IDS / 2) : config.ACK_QUEUE_MAX_IDS,
    screen: owners ? (call: AckCall) => owners.screen(call) : undefined,
  };
  return new AckCommitter(deps, options, (calls, ids) => {
    metrics.groupCommitCalls.observe(calls);
    metrics.groupCommitIds.observe(ids);
  });
}

/**
 * With several tenants, a host's slots go to each tenant's due events up to half of them first, and
 * one tenant never holds the last: a tenant whose events hang at a host that others use too (a
 * webhook provider, another tenant's receiver) leaves them slots there.
 */
function shareOnHost(perHost: number, tenants: number): ShareLimits['perTenantOnHost'] {
  if (tenants < 2) return { fair: perHost, most: perHost };
  return { fair: Math.ceil(perHost / 2), most: Math.max(1, perHost - 1) };
}

const tenantsOf = (config: Config) => new Set((config.tokens ?? []).map((t) => t.tenant)).size;

/** TENANT_MAX_BATCHES and TENANT_MAX_ITEMS, each unset or 0 for no limit; null when neither limits. */
function tenantQuota(config: Config, db: Db): TenantQuota | null {
  const limit = (set: number | undefined) => (set ? set : Infinity);
  const limits = { batches: limit(config.TENANT_MAX_BATCHES), items: limit(config.TENANT_MAX_ITEMS) };
  return limits.batches === Infinity && limits.items === Infinity ? null : new TenantQuota(db, limits);
}

/** WAIT_MAX long-polls per process; with several tenants one may hold at most half (at least one). */
function waitLimits(config: Config): WaitLimits {
  return { total: config.WAIT_MAX, perTenant: tenantsOf(config) > 1 ? Math.max(1, Math.floor(config.WAIT_MAX / 2)) : config.WAIT_MAX };
}

/** Callback delivery settings; a tenant's own callbackSecret signs its events, else CALLBACK_SECRET. */
function deliveryOptions(config: Config): DeliveryOptions {
  const secrets = new Map((config.tokens ?? []).filter((t) => t.callbackSecret).map((t) => [t.tenant, t.callbackSecret as string]));
  // A tenant holds at most half the slots, and one receiving host half of a tenant's: a host that
  // never answers leaves its own tenant's other hosts slots too (CALLBACK_CONCURRENCY ≥ 4).
  const perTenant = Math.max(1, Math.ceil(config.CALLBACK_CONCURRENCY / 2));
  const perHost = Math.max(1, Math.ceil(perTenant / 2));
  return {
    secretFor: (tenant) => secrets.get(tenant) ?? config.CALLBACK_SECRET,
    timeoutMs: config.CALLBACK_TIMEOUT,
    backoff: { baseMs: config.CALLBACK_BACKOFF_BASE, capMs: config.CALLBACK_BACKOFF_CAP },
    maxAgeMs: config.CALLBACK_MAX_AGE,
    concurrency: config.CALLBACK_CONCURRENCY,
    share: { perTenant, perHost, perTenantOnHost: shareOnHost(perHost, tenantsOf(config)) },
  };
}
