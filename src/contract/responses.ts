import { z } from 'zod';

import { BATCH_OUTCOMES, BATCH_STATES, EVENT_STATUSES, ITEM_STATES, REJECT_REASONS } from './vocabulary';

/**
 * Response shapes of the HTTP contract: the source of the OpenAPI document and of the types the
 * service, the client and the dashboard use (z.infer). A test checks real responses against the
 * generated document, so these cannot drift from what the service sends.
 */
const time = z.iso.datetime();

export const batchSchema = z.object({
  id: z.uuid(),
  state: z.enum(BATCH_STATES),
  outcome: z.enum(BATCH_OUTCOMES).nullable(),
  userKey: z.string().nullable(),
  metadata: z.record(z.string(), z.unknown()).nullable(),
  callbackUrl: z.string().nullable(),
  total: z.number().int().min(0),
  succeeded: z.number().int().min(0),
  failed: z.number().int().min(0),
  pending: z.number().int().min(0),
  createdAt: time,
  updatedAt: time,
  sealedAt: time.nullable(),
  completedAt: time.nullable(),
  cancelledAt: time.nullable(),
  parentItem: z.string().nullable(),
});

export const errorSchema = z.object({ error: z.object({ code: z.string(), message: z.string() }) });

export const batchPageSchema = z.object({ batches: z.array(batchSchema), nextCursor: z.string().nullable() });

export const addResultSchema = z.object({
  batchId: z.uuid(),
  total: z.number().int(),
  groups: z.array(z.object({ id: z.uuid(), size: z.number().int().min(1) })),
});

export const ackResultSchema = z.object({
  acked: z.number().int().min(0),
  duplicates: z.number().int().min(0),
  rejected: z.array(z.object({ id: z.string(), reason: z.enum(REJECT_REASONS) })),
  completed: z.array(batchSchema),
});

export const eventsSchema = z.object({
  events: z.array(
    z.object({
      id: z.uuid(),
      event: z.string(),
      url: z.string(),
      status: z.enum(EVENT_STATUSES),
      attempts: z.number().int(),
      nextAttemptAt: time.nullable(),
      firstAttemptAt: time.nullable(),
      lastAttemptAt: time.nullable(),
      lastError: z.string().nullable(),
      deliveredAt: time.nullable(),
      createdAt: time,
    }),
  ),
});

export const sweepResultSchema = z.object({ batchesRemoved: z.number().int().min(0), groupsRemoved: z.number().int().min(0) });

export const statusSchema = z.object({ status: z.string() });

export const itemSchema = z.object({
  id: z.string(),
  batchId: z.uuid(),
  state: z.enum(ITEM_STATES),
  batchState: z.enum(BATCH_STATES),
});

export const failurePageSchema = z.object({
  failures: z.array(z.object({ id: z.string(), error: z.string(), failedAt: time })),
  nextCursor: z.string().nullable(),
  dropped: z.number().int().min(0),
});

export const whoamiSchema = z.object({ tenant: z.string(), scopes: z.array(z.enum(['admin', 'consume', 'produce', 'read'])) });

/** The Batch object of the HTTP contract. */
export type BatchView = z.infer<typeof batchSchema>;
export type Rejection = z.infer<typeof ackResultSchema>['rejected'][number];
/** The Ack result of the HTTP contract. */
export type AckResult = z.infer<typeof ackResultSchema>;
export type ItemStatus = z.infer<typeof itemSchema>;
export type FailurePage = z.infer<typeof failurePageSchema>;
export type BatchPage = z.infer<typeof batchPageSchema>;
export type EventsView = z.infer<typeof eventsSchema>;
/** Who a token is: its tenant and scopes (GET /v1/whoami). */
export type Whoami = z.infer<typeof whoamiSchema>;
