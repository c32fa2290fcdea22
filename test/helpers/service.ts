import request from 'supertest';

import { RollcallClient } from '../../src/client';
import { createServer } from '../../src/http/server';
import { createRollcall, Rollcall, RollcallOptions } from '../../src/rollcall';
import { useCitusForms } from '../../src/store/db';
import { Backend, TestDatabase } from './backends';
import { listen } from './listening';
import { TcpProxy } from './tcpProxy';

/** An app in-process: supertest for requests whose shape a test checks, a real client for the rest. */
export interface TestApp {
  api: ReturnType<typeof request>;
  url: string;
  client: RollcallClient;
  /** A real client on the app that sends `token` (its tenant and scopes decide what it may do). */
  clientWith(token: string): RollcallClient;
  rollcall: Rollcall;
  /** Closes the listening server, then the app. */
  stop(): Promise<void>;
}

/** Serves `rollcall` on a free port (supertest binds its own port 0 per request). */
export async function serve(rollcall: Rollcall): Promise<TestApp> {
  const server = await listen(rollcall.app);
  return {
    api: request(createServer(rollcall.app)),
    url: server.url,
    client: new RollcallClient({ baseUrl: server.url }),
    clientWith: (token) => new RollcallClient({ baseUrl: server.url, token }),
    rollcall,
    async stop() {
      await server.close();
      await rollcall.close();
    },
  };
}

export interface TestService extends TestApp {
  database: TestDatabase;
  /** The injected clock: tests move time instead of sleeping. */
  clock: { now: number };
  /** Stops the app and drops its database. */
  stop(): Promise<void>;
}

/** Starts the app in-process on its own fresh database. */
export async function startService(backend: Backend, env: Record<string, string> = {}, options: Omit<RollcallOptions, 'now'> = {}): Promise<TestService> {
  const database = await backend.create(env);
  const clock = { now: Date.UTC(2026, 10, 21, 12, 0, 0) };
  const app = await serve(formsOf(database, await createRollcall(database.config, { ...options, now: () => clock.now })));
  return {
    ...app,
    database,
    clock,
    async stop() {
      await app.stop();
      await database.drop();
    },
  };
}

/** Item IDs of every item of the given groups. */
export function itemIds(batchId: string, groups: Array<{ id: string; size: number }>): string[] {
  const ids: string[] = [];
  for (const group of groups) for (let i = 0; i < group.size; i++) ids.push(`${batchId}:${group.id}:${i}`);
  return ids;
}

/** A deterministic shuffle (so a failing run can be replayed). */
export function shuffled<T>(items: T[], seed = 42): T[] {
  const out = [...items];
  let state = seed;
  for (let i = out.length - 1; i > 0; i--) {
    state = (state * 1103515245 + 12345) & 0x7fffffff;
    const j = state % (i + 1);
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

export function chunks<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** A second app on the same database and clock: another replica, in-process. */
export async function startReplica(svc: TestService): Promise<TestApp> {
  return serve(formsOf(svc.database, await createRollcall(svc.database.config, { now: () => svc.clock.now })));
}

/** `rollcall`, on Citus's statement forms where `database` asks for them (the `pg-citus-forms` backend): for a replica made by hand. */
export function formsOf(database: TestDatabase, rollcall: Rollcall): Rollcall {
  if (database.citusForms) useCitusForms(rollcall.db);
  return rollcall;
}

/** An app whose database connections pass through a proxy the test controls (to hold, freeze or cut them). */
export interface ProxiedService extends TestApp {
  proxy: TcpProxy;
  /** Its database, reached directly (not through the proxy): for another replica beside it. */
  database: TestDatabase;
  /** Lets held connections go, stops the app, closes the proxy and drops the database. */
  stop(): Promise<void>;
}

/** Starts the app in-process on its own fresh database, reached through a TcpProxy. */
export async function startBehindProxy(backend: Backend, env: Record<string, string> = {}): Promise<ProxiedService> {
  const database = await backend.create(env);
  const url = new URL(database.config.DATABASE_URL as string);
  const proxy = new TcpProxy(url.hostname, Number(url.port));
  await proxy.open();
  url.host = `127.0.0.1:${proxy.port}`;
  const app = await serve(formsOf(database, await createRollcall({ ...database.config, DATABASE_URL: url.toString() })));
  return {
    ...app,
    proxy,
    database,
    async stop() {
      proxy.speak();
      await app.stop();
      await proxy.cut();
      await database.drop();
    },
  };
}
