import { Knex } from 'knex';

import type { EventStatus } from '../contract/vocabulary';
import { Db, Queryable } from './db';
import { outside, outsideAll } from './ranges';

export type { EventStatus };

export interface OutboxEvent {
  id: string;
  batchId: string;
  /** The batch's tenant: whose secret signs the event, and whose share of deliveries it uses. */
  tenant: string;
  /** The URL's host (with port), lower case: deliveries are shared among receiving hosts too. */
  host: string;
  event: string;
  url: string;
  payload: string;
  status: EventStatus;
  attempts: number;
  nextAttemptAt: number;
  lastAttemptAt: number | null;
  /** When it was first tried: CALLBACK_MAX_AGE counts from here (migration 0019). */
  firstAttemptAt: number | null;
  lastError: string | null;
  deliveredAt: number | null;
  createdAt: number;
}

interface OutboxRow {
  id: string;
  batch_id: string;
  tenant: string;
  host: string;
  event: string;
  url: string;
  payload: string;
  status: string;
  attempts: number;
  next_attempt_at: number | string;
  claim: string | null;
  last_attempt_at: number | string | null;
  first_attempt_at: number | string | null;
  last_error: string | null;
  delivered_at: number | string | null;
  created_at: number | string;
}

const orNull = (v: number | string | null) => (v === null ? null : Number(v));

const fromRow = (row: OutboxRow): OutboxEvent => ({
  id: row.id,
  batchId: row.batch_id,
  tenant: row.tenant,
  host: row.host,
  event: row.event,
  url: row.url,
  payload: row.payload,
  status: row.status as EventStatus,
  attempts: Number(row.attempts),
  nextAttemptAt: Number(row.next_attempt_at),
  lastAttemptAt: orNull(row.last_attempt_at),
  firstAttemptAt: orNull(row.first_attempt_at),
  lastError: row.last_error,
  deliveredAt: orNull(row.delivered_at),
  createdAt: Number(row.created_at),
});

/** What a new event needs; the rest starts as pending with no attempts. */
export type NewEvent = Pick<OutboxEvent, 'id' | 'batchId' | 'tenant' | 'event' | 'url' | 'payload' | 'createdAt'>;

/** The column's width (migration 0008). */
const HOST_WIDTH = 255;

/**
 * The host a delivery goes to (name and port), for sharing deliveries among hosts. Cut to the
 * column's width: a 253-character name (DNS's longest, the API's limit) with a port is longer, and
 * a batch made before callback hosts were limited may name a longer one still; its events must be
 * written all the same (a longer value failed the transaction that completes the batch). One made
 * before URLs were checked as Node reads them may name one Node refuses (a port past 65535): its
 * host is '' (as migration 0008 has it), and its attempts fail, so it ages to dead.
 */
const hostOf = (url: string): string => (URL.canParse(url) ? new URL(url).host.toLowerCase().slice(0, HOST_WIDTH) : '');

/** Writes a new pending event; runs in the transaction that completes the batch. */
export function insertEventQuery(q: Queryable, event: NewEvent): Knex.QueryBuilder {
  return q('outbox').insert(eventRow(event));
}

/** A new pending event as its row's columns. */
export function eventRow(event: NewEvent) {
  return {
    id: event.id,
    batch_id: event.batchId,
    tenant: event.tenant,
    host: hostOf(event.url),
    event: event.event,
    url: event.url,
    payload: event.payload,
    status: 'pending',
    attempts: 0,
    next_attempt_at: event.createdAt,
    created_at: event.createdAt,
  };
}

/** A due event as the dispatcher chooses among them, before it claims any. */
export interface DueEvent {
  id: string;
  tenant: string;
  host: string;
}

/** Events not to claim: those of tenants, hosts and tenants on a host whose share is in use, and those this process is still delivering. */
export interface Saturated {
  tenants: string[];
  hosts: string[];
  pairs: Array<{ tenant: string; host: string }>;
  /** When given, only these tenants' events for these hosts are read. */
  only?: Array<{ tenant: string; host: string }>;
  /** Delivering here already (a lease that ran out while the outcome was being recorded). */
  eventIds: string[];
}

/**
 * Keeps events that may be sent now: a batch's batch.first_failure goes before its terminal event
 * (batch.completed / batch.cancelled), and a parent's batch.completed only after every event of its
 * children was delivered or given up. Blockers are written before the event they block, or in the
 * same transaction, but for one case: a child made for a parent item just as a worker acked that item
 * itself, when the parent may complete before the child exists; the child's events then hold the
 * parent's from their writing on, and what was sent already was sent. This plain, unlocked read can
 * otherwise only be too careful for a moment, never wrong.
 *
 * The children's check asks, for each parent's batch.completed read, whether one of its children
 * has an event pending (by index: the children by `(parent_batch_id, id)`, their events by
 * `batch_id`). Asked as one list of every parent with such a child, it read every pending event of
 * every child on each read: with 100,000 children's events backed off at a receiver that is down,
 * 77 ms a read on PostgreSQL and 60 ms on SQLite (docs/benchmarks.md). On Citus (`sharded`) it stays
 * that uncorrelated `IN (…)`: a subquery correlated on a column that is not the distribution column
 * (child.parent_batch_id) is refused there, an uncorrelated one is run first and its result used
 * (docs/scaling.md). The first check correlates on batch_id, which is.
 */
function inOrder(q: Queryable, query: Knex.QueryBuilder, sharded: boolean): Knex.QueryBuilder {
  return query.whereNot(heldBack(q, sharded));
}

/**
 * The events inOrder keeps back: behind their batch's pending batch.first_failure, or a parent's
 * batch.completed behind a child's pending event. Off Citus, each check is a subquery for one value
 * (`(SELECT 1 … LIMIT 1) IS NOT NULL`), which the database runs per event it reads, by index, and
 * stops at the first match. Written as `EXISTS`, PostgreSQL and MariaDB built the set of every
 * pending first failure (a hash, a materialized table) on each read that had any due event to check:
 * 100,000 first failures backing off at a receiver that is down made each read of due events take
 * 98 ms on PostgreSQL and 164 ms on MariaDB, where it now takes 5 and 13 (docs/benchmarks.md).
 * On Citus the checks stay as they were (scaling.md; not run here).
 */
function heldBack(q: Queryable, sharded: boolean) {
  const childEventPending = (children: Knex.QueryBuilder) =>
    children.from('batches as child').join('outbox as child_event', 'child_event.batch_id', 'child.id').where('child_event.status', 'pending');
  const firstFailurePending = (earlier: Knex.QueryBuilder) =>
    earlier
      .select(q.raw('1'))
      .from('outbox as earlier')
      .whereRaw('earlier.batch_id = outbox.batch_id')
      .where('earlier.status', 'pending')
      .where('earlier.event', 'batch.first_failure');
  const anyRow = (query: Knex.QueryBuilder) => q.raw('(?) is not null', [query.limit(1)]);
  return (held: Knex.QueryBuilder) =>
    held
      .where((behindFirstFailure) => {
        behindFirstFailure.where('outbox.event', '<>', 'batch.first_failure');
        if (sharded) behindFirstFailure.whereExists(firstFailurePending);
        else behindFirstFailure.where(anyRow(firstFailurePending(q.queryBuilder())));
      })
      .orWhere((behindChildren) => {
        behindChildren.where('outbox.event', 'batch.completed');
        if (sharded)
          behindChildren.whereIn('outbox.batch_id', (parents) =>
            childEventPending(parents.select('child.parent_batch_id')).whereNotNull('child.parent_batch_id'),
          );
        else behindChildren.where(anyRow(childEventPending(q.queryBuilder().select(q.raw('1'))).whereRaw('child.parent_batch_id = outbox.batch_id')));
      });
}

/** A due event that may be held back (a batch.completed or batch.cancelled), as parkHeld reads it. */
export interface HeldEvent {
  id: string;
  batchId: string;
  event: string;
  nextAttemptAt: number;
}

/** The events inOrder may keep back: a batch's first failure goes first, and is never held itself. */
export const MAY_BE_HELD = ['batch.completed', 'batch.cancelled'] as const;

/**
 * Up to `limit` due pending events of this kind, from just past `after` (the last one read) in
 * `(next_attempt_at, id)` order: one range of 0023's `(status, event, next_attempt_at, id)`, each
 * row read once a round however many are held or not. Which of them are held, parkHeld asks of
 * their blockers.
 */
export async function dueEventsOfKind(
  q: Queryable,
  event: (typeof MAY_BE_HELD)[number],
  now: number,
  after: Pick<HeldEvent, 'nextAttemptAt' | 'id'> | null,
  limit: number,
): Promise<HeldEvent[]> {
  let query = q('outbox')
    .select('id', 'batch_id', 'event', 'next_attempt_at')
    .where('status', 'pending')
    .where('event', event)
    .where('next_attempt_at', '<=', now);
  if (after)
    query = query
      .where('next_attempt_at', '>=', after.nextAttemptAt)
      .where((past) => past.where('next_attempt_at', '>', after.nextAttemptAt).orWhere('id', '>', after.id));
  const rows = (await query.orderBy('next_attempt_at').orderBy('id').limit(limit)) as Array<{
    id: string;
    batch_id: string;
    event: string;
    next_attempt_at: number | string;
  }>;
  return rows.map((row) => ({ id: row.id, batchId: row.batch_id, event: row.event, nextAttemptAt: Number(row.next_attempt_at) }));
}

/**
 * What holds these batches' events back and is not being tried now (`claim` is NULL), by batch: the
 * latest next attempt of its pending batch.first_failure, and of its children's pending events. Such
 * an event cannot be delivered or given up before its next attempt, so a held event cannot go before
 * the latest of these. Read by index: first failures by 0016's `(event, status, batch_id)`, children
 * by `(parent_batch_id, …)` and their events by `batch_id`.
 */
export async function blockersNextAttempts(q: Queryable, batchIds: string[]): Promise<{ firstFailure: Map<string, number>; children: Map<string, number> }> {
  const byBatch = (rows: Array<{ batch_id: string; at: unknown }>) => new Map(rows.map((row) => [row.batch_id, Number(row.at)]));
  const firstFailure = (await q('outbox')
    .select('batch_id', q.raw('max(next_attempt_at) as at'))
    .where('event', 'batch.first_failure')
    .where('status', 'pending')
    .whereIn('batch_id', batchIds)
    .whereNull('claim')
    .groupBy('batch_id')) as Array<{ batch_id: string; at: unknown }>;
  const children = (await q('batches as child')
    .join('outbox as child_event', 'child_event.batch_id', 'child.id')
    .select('child.parent_batch_id as batch_id', q.raw('max(child_event.next_attempt_at) as at'))
    .whereIn('child.parent_batch_id', batchIds)
    .where('child_event.status', 'pending')
    .whereNull('child_event.claim')
    .groupBy('child.parent_batch_id')) as Array<{ batch_id: string; at: unknown }>;
  return { firstFailure: byBatch(firstFailure), children: byBatch(children) };
}

/**
 * Moves held events' next attempt to `until`, if they are still due and pending (a claim meanwhile
 * took them: leave them). Returns how many were moved.
 */
export async function parkEvents(q: Queryable, events: Array<Pick<HeldEvent, 'id' | 'batchId'>>, until: number, now: number): Promise<number> {
  if (events.length === 0) return 0;
  return pendingOf(q, events).where('next_attempt_at', '<=', now).update({ next_attempt_at: until });
}

/** These pending events, named with their batches (Citus: each shard holds its own). */
function pendingOf(q: Queryable, events: Array<Pick<HeldEvent, 'id' | 'batchId'>>): Knex.QueryBuilder {
  return q('outbox')
    .whereIn('batch_id', [...new Set(events.map((e) => e.batchId))])
    .whereIn(
      'id',
      events.map((e) => e.id),
    )
    .where('status', 'pending');
}

/** The parents of these batches (those that have one). */
export async function parentsOf(q: Queryable, batchIds: string[]): Promise<string[]> {
  if (batchIds.length === 0) return [];
  const rows = (await q('batches').distinct('parent_batch_id').whereIn('id', batchIds).whereNotNull('parent_batch_id')) as Array<{ parent_batch_id: string }>;
  return rows.map((row) => row.parent_batch_id);
}

/**
 * Makes events parked at `until` due at `now` again, unless claimed since: parkHeld's undo for those
 * whose blocker went (or moved earlier) between its read and the park. Returns how many.
 */
export async function unparkEvents(q: Queryable, events: Array<Pick<HeldEvent, 'id' | 'batchId'>>, until: number, now: number): Promise<number> {
  if (events.length === 0) return 0;
  return pendingOf(q, events).whereNull('claim').where('next_attempt_at', until).update({ next_attempt_at: now });
}

/**
 * Up to `limit` due pending events that may be sent now (inOrder), oldest due first, leaving out
 * saturated tenants, hosts and tenants on a host (so hundreds of events waiting on one receiver, or
 * one tenant's on a shared host, never hide another's), as index ranges (`outsideAll`, `outside`; the indexes of 0017).
 * A plain read that locks nothing: claimEvents then takes the ones chosen, if still due. `sharded`:
 * the tables are on Citus (onCitus), which takes another form of the children's check (inOrder).
 */
export async function dueEvents(q: Queryable, now: number, limit: number, saturated: Saturated, sharded: boolean): Promise<DueEvent[]> {
  let ready = inOrder(q, q('outbox').select('id', 'tenant', 'host').where('status', 'pending').where('next_attempt_at', '<=', now), sharded);
  if (saturated.tenants.length > 0) ready = ready.where(outsideAll('outbox.tenant', saturated.tenants));
  if (saturated.hosts.length > 0) ready = ready.where(outsideAll('outbox.host', saturated.hosts));
  // Not this tenant on this host: another tenant, or another host.
  for (const { tenant, host } of saturated.pairs)
    ready = ready.where((pair) => pair.where(outside('outbox.tenant', tenant)).orWhere(outside('outbox.host', host)));
  const only = saturated.only;
  if (only?.length === 0) return [];
  if (only)
    ready = ready.where((any) => only.forEach(({ tenant, host }) => any.orWhere((pair) => pair.where('outbox.tenant', tenant).where('outbox.host', host))));
  if (saturated.eventIds.length > 0) ready = ready.whereNotIn('outbox.id', saturated.eventIds);
  return (await ready.orderBy('next_attempt_at').limit(limit)) as DueEvent[];
}

/**
 * Claims the chosen events for `leaseMs` with one conditional UPDATE: only rows still pending and
 * due are taken, so of two replicas that chose the same event the second finds it no longer due
 * (its UPDATE waits for the first's row lock, then reads the committed row again) and skips it.
 * Claimed rows carry `claim`, and their next attempt is pushed past the lease, so no other replica
 * picks them while this one delivers; a replica that dies mid-delivery leaves the event due again
 * when the lease ends. No `SELECT … FOR UPDATE SKIP LOCKED` across batches: Citus refuses a locking
 * read that spans shards, and this shape is the same on every database.
 */
export async function claimEvents(q: Queryable, ids: string[], claim: string, now: number, leaseMs: number): Promise<OutboxEvent[]> {
  if (ids.length === 0) return [];
  await q('outbox')
    .whereIn('id', ids)
    .where('status', 'pending')
    .where('next_attempt_at', '<=', now)
    .update({
      claim,
      next_attempt_at: now + leaseMs,
      // Before the increment of attempts: MySQL reads a column SET earlier in the statement as set.
      // An event a replica older than migration 0019 tried counts from its creation, as it did there.
      first_attempt_at: q.raw('COALESCE(first_attempt_at, CASE WHEN attempts > 0 THEN created_at ELSE ? END)', [now]),
      attempts: q.raw('attempts + 1'),
      last_attempt_at: now,
    });
  // With status, whose rows a claim leaves pending: on Citus the primary key is (batch_id, id), so
  // without it no index leads with what this read names, and each shard walked its whole outbox
  // (delivered and dead events stay until their batch is swept) on every claim.
  const rows = (await q('outbox')
    .where('status', 'pending')
    .where('next_attempt_at', now + leaseMs)
    .whereIn('id', ids)
    .where('claim', claim)) as OutboxRow[];
  return rows.map(fromRow);
}

/**
 * An event as its outcome writes name it: with its batch too, so that on Citus, where outbox is
 * distributed by batch_id, each write goes to the one shard that holds the row, not to every shard.
 */
type EventKey = Pick<OutboxEvent, 'id' | 'batchId'>;

const claimedRow = (event: EventKey, claim: string) => ({ batch_id: event.batchId, id: event.id, claim, status: 'pending' });

/** Records a 2xx. Only the holder of the claim may; returns false when the lease was lost. */
export async function markDelivered(db: Db, event: EventKey, claim: string, now: number): Promise<boolean> {
  const n = await db('outbox').where(claimedRow(event, claim)).update({ status: 'delivered', delivered_at: now, claim: null, last_error: null });
  return n === 1;
}

/**
 * Gives an event back due at once, its attempt cut off (a shutdown): another replica sends it
 * without waiting for the lease to end. The attempt still counts (the receiver may have had it).
 * False when the claim was lost.
 */
export async function releaseClaim(db: Db, event: EventKey, claim: string, now: number): Promise<boolean> {
  const n = await db('outbox').where(claimedRow(event, claim)).update({ claim: null, next_attempt_at: now });
  return n === 1;
}

/** Records a failed attempt and when to try next (or that the event is given up: `dead`); false when the claim was lost. */
export async function markFailed(db: Db, event: EventKey, claim: string, error: string, nextAttemptAt: number | null): Promise<boolean> {
  const n = await db('outbox')
    .where(claimedRow(event, claim))
    .update({
      claim: null,
      last_error: error.slice(0, 1024),
      ...(nextAttemptAt === null ? { status: 'dead' } : { next_attempt_at: nextAttemptAt }),
    });
  return n === 1;
}

/** Every event of a batch, oldest first (for operators). */
export async function listEventsOfBatch(q: Queryable, batchId: string): Promise<OutboxEvent[]> {
  return ((await q('outbox').where('batch_id', batchId).orderBy('created_at').orderBy('id')) as OutboxRow[]).map(fromRow);
}

/** Ancestors freeHeldEventsUpFrom walks through at most: far deeper than any family seen. */
const MAX_FREED_LEVELS = 64;

/**
 * Makes a parent's batch.completed due now if it waits for a retry of a child's event that is no
 * longer there (the child was deleted): a pending one not claimed that is not due, whose next
 * attempt is on parkHeld's grain (`grainMs`), is one parkHeld moved, whether it was tried before or
 * not (a parent completed by hand, its callback refused, then held behind its child). One backing
 * off from its own failed attempt lands on the grain one time in `grainMs` and is then tried early
 * once; others keep their backoff (before, each child deleted sent such an event again at once).
 * Left as it was, a moved one went at the time it was moved to, up to CALLBACK_BACKOFF_CAP later.
 * Then the same for that parent's parent, and so on while a level had one to free: a grandparent's
 * event waited for the parent's, which had waited for the child's (a level whose event was not
 * waiting holds nobody above it back). Returns how many.
 */
export async function freeHeldEventsUpFrom(q: Queryable, parentBatchId: string, now: number, grainMs: number): Promise<number> {
  let freed = 0;
  let parent: string | null = parentBatchId;
  for (let level = 0; parent !== null && level < MAX_FREED_LEVELS; level++) {
    const n: number = await q('outbox')
      .where({ batch_id: parent, event: 'batch.completed', status: 'pending' })
      .whereNull('claim')
      .where('next_attempt_at', '>', now)
      .whereRaw('next_attempt_at % ? = 0', [grainMs])
      .update({ next_attempt_at: now });
    if (n === 0) break;
    freed += n;
    const row = (await q('batches').select('parent_batch_id').where('id', parent).first()) as { parent_batch_id: string | null } | undefined;
    parent = row?.parent_batch_id ?? null;
  }
  return freed;
}
