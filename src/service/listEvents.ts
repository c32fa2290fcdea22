import { Caller } from '../domain/batch';
import { listEventsOfBatch, OutboxEvent } from '../store/outbox';
import { ServiceDeps } from './deps';
import { findExistingBatch } from './existingBatch';
import { reading } from './reading';

export interface EventView {
  id: string;
  event: string;
  url: string;
  status: OutboxEvent['status'];
  attempts: number;
  nextAttemptAt: string | null;
  /** CALLBACK_MAX_AGE counts from here: a failing event is given up that long after it. */
  firstAttemptAt: string | null;
  lastAttemptAt: string | null;
  lastError: string | null;
  deliveredAt: string | null;
  createdAt: string;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** A batch's callback events with their delivery state, so an operator can see a stuck callback. */
export async function listEvents(deps: ServiceDeps, caller: Caller, batchId: string): Promise<EventView[]> {
  const batch = await findExistingBatch(deps, caller, batchId);
  return (await reading(() => listEventsOfBatch(deps.db, batch.id))).map((e) => ({
    id: e.id,
    event: e.event,
    url: e.url,
    status: e.status,
    attempts: e.attempts,
    nextAttemptAt: e.status === 'pending' ? iso(e.nextAttemptAt) : null,
    firstAttemptAt: iso(e.firstAttemptAt),
    lastAttemptAt: iso(e.lastAttemptAt),
    lastError: e.lastError,
    deliveredAt: iso(e.deliveredAt),
    createdAt: iso(e.createdAt) as string,
  }));
}
