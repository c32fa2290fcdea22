import { randomUUID } from 'node:crypto';

import { Knex } from 'knex';

import { dueEvents } from '../../src/store/outbox';

const WAITING = 50_000;
const READS = 21;

export interface ClaimReads {
  /** The dispatcher's read of due events (one claim's), median ms, with 50,000 events in backoff: a receiver that is down. */
  backoffMs: number;
  /** The same with those 50,000 due but of a tenant whose share is in use (left out of the read). */
  saturatedMs: number;
}

/** Times the callback dispatcher's read of due events while a large backlog waits in the outbox. */
export async function measureClaimReads(db: Knex): Promise<ClaimReads> {
  const now = Date.now();
  const row = (tenant: string, nextAttemptAt: number) => {
    const id = randomUUID();
    return {
      id,
      batch_id: id,
      tenant,
      host: `${tenant}.example:443`,
      event: 'batch.completed',
      url: `https://${tenant}.example/hook`,
      payload: '{}',
      status: 'pending',
      attempts: 1,
      next_attempt_at: nextAttemptAt,
      created_at: now,
    };
  };
  const waiting = Array.from({ length: WAITING }, (_, i) => row('bench-waiting', now + 3_600_000 + i));
  for (let i = 0; i < waiting.length; i += 1000) await db('outbox').insert(waiting.slice(i, i + 1000));
  await db('outbox').insert(Array.from({ length: 64 }, (_, i) => row('bench-due', now - 1000 + i)));
  // With the statistics a server keeps after such a change (PostgreSQL's autovacuum, InnoDB's own
  // recalculation): read at once, PostgreSQL still plans for a table of a few rows (docs/benchmarks.md).
  const analyze = () => db.raw(db.client.config.client === 'pg' ? 'ANALYZE outbox' : 'ANALYZE TABLE outbox');
  await analyze();
  try {
    const medianRead = async (saturatedTenants: string[]) => {
      const times: number[] = [];
      for (let i = 0; i < READS; i++) {
        const started = performance.now();
        const due = await dueEvents(db, now, 64, { tenants: saturatedTenants, hosts: [], pairs: [], eventIds: [] }, false);
        times.push(performance.now() - started);
        if (due.length !== 64) throw new Error(`claim read found ${due.length} due events, not 64`);
      }
      return times.sort((a, b) => a - b)[READS >> 1]!;
    };
    const backoffMs = await medianRead([]);
    await db('outbox')
      .where('tenant', 'bench-waiting')
      .update({ next_attempt_at: now - 3_600_000 });
    await analyze();
    const saturatedMs = await medianRead(['bench-waiting']);
    return { backoffMs, saturatedMs };
  } finally {
    await db('outbox').whereIn('tenant', ['bench-waiting', 'bench-due']).delete();
  }
}
