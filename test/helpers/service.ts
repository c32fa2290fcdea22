import request from 'supertest';

import { createServer } from '../../src/http/server';
import { createRollcall, Rollcall } from '../../src/rollcall';
import { Backend, TestDatabase } from './backends';

export interface TestService {
  api: ReturnType<typeof request>;
  rollcall: Rollcall;
  database: TestDatabase;
  /** The injected clock: tests move time instead of sleeping. */
  clock: { now: number };
  stop(): Promise<void>;
}

/** Starts the app in-process on its own fresh database (supertest binds port 0). */
export async function startService(backend: Backend, env: Record<string, string> = {}): Promise<TestService> {
  const database = await backend.create(env);
  const clock = { now: Date.UTC(2026, 10, 21, 12, 0, 0) };
  const rollcall = await createRollcall(database.config, { now: () => clock.now });
  return {
    api: request(createServer(rollcall.app)),
    rollcall,
    database,
    clock,
    async stop() {
      await rollcall.close();
      await database.drop();
    },
  };
}

/** Opens a batch with `count` items and seals it; returns its id, groups and every item ID. */
export async function sealedBatch(api: TestService['api'], count: number) {
  const id = (await api.post('/v1/batches').send({})).body.id as string;
  const added = await api.post(`/v1/batches/${id}/items`).send({ count });
  await api.post(`/v1/batches/${id}/seal`);
  const groups = added.body.groups as Array<{ id: string; size: number }>;
  return { id, groups, ids: itemIds(id, groups) };
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
export async function startReplica(svc: TestService): Promise<{ api: ReturnType<typeof request>; rollcall: Rollcall }> {
  const rollcall = await createRollcall(svc.database.config, { now: () => svc.clock.now });
  return { api: request(createServer(rollcall.app)), rollcall };
}
