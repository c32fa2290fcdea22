import pino, { Logger } from 'pino';
import type { Express } from 'express';
import { Config } from './config';
import { createApp } from './http/app';
import { AckCommitter } from './service/ackCommitter';
import { ackItems } from './service/ackItems';
import { ServiceDeps } from './service/deps';
import { Db, openDb } from './store/db';
import { migrateLatest } from './store/migrations';

/** The service wired together: database, use cases, HTTP app; `close` stops it in order. */
export interface Rollcall {
  app: Express;
  deps: ServiceDeps;
  db: Db;
  log: Logger;
  close(): Promise<void>;
}

export interface RollcallOptions {
  /** Clock for every use case; tests pass their own instead of sleeping. */
  now?: () => number;
  log?: Logger;
}

/** Opens the database, applies migrations and builds the app. Does not listen. */
export async function createRollcall(config: Config, options: RollcallOptions = {}): Promise<Rollcall> {
  const log = options.log ?? pino({ level: config.LOG_LEVEL });
  const db = openDb(config);
  try {
    const applied = await migrateLatest(db);
    if (applied.length > 0) log.info({ applied }, 'migrations applied');
  } catch (error) {
    await db.destroy();
    throw error;
  }
  const deps: ServiceDeps = {
    db,
    log,
    now: options.now ?? Date.now,
    groupSize: config.GROUP_SIZE,
    tx: { retries: config.TX_RETRIES, onRetry: (err, attempt) => log.debug({ err, attempt }, 'transaction retried') },
  };
  const committer =
    config.ACK_GROUP_COMMIT === 'on'
      ? new AckCommitter(deps, { windowMs: config.ACK_GROUP_COMMIT_WINDOW_MS, maxIds: config.ACK_GROUP_COMMIT_MAX_IDS })
      : null;
  const submitAck = committer
    ? committer.submit.bind(committer)
    : async (call: Parameters<AckCommitter['submit']>[0]) => (await ackItems(deps, [call]))[0]!;
  const app = createApp({ service: deps, submitAck, bodyLimit: config.BODY_LIMIT, log });
  return {
    app,
    deps,
    db,
    log,
    async close() {
      await committer?.drain();
      await db.destroy();
    },
  };
}
