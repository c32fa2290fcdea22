import { z } from 'zod';

/**
 * Response shapes of the HTTP contract, for the OpenAPI document. A test checks real responses
 * against the generated document, so these cannot drift from what the service sends.
 */
const time = z.iso.datetime();

export const batchSchema = z.object({
  id: z.uuid(),
  state: z.enum(['open', 'sealed', 'complete', 'cancelled']),
  outcome: z.enum(['succeeded', 'failed', 'cancelled']).nullable(),
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
  rejected: z.array(z.object({ id: z.string(), reason: z.enum(['malformed', 'unknown_batch', 'unknown_group', 'index_out_of_range', 'batch_cancelled']) })),
  completed: z.array(batchSchema),
});

export const eventsSchema = z.object({
  events: z.array(
    z.object({
      id: z.uuid(),
      event: z.string(),
      url: z.string(),
      status: z.enum(['pending', 'delivered', 'dead']),
      attempts: z.number().int(),
      nextAttemptAt: time.nullable(),
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
  state: z.enum(['pending', 'succeeded', 'failed']),
  batchState: z.enum(['open', 'sealed', 'complete', 'cancelled']),
});

export const failurePageSchema = z.object({
  failures: z.array(z.object({ id: z.string(), error: z.string(), failedAt: time })),
  nextCursor: z.string().nullable(),
  dropped: z.number().int().min(0),
});

export const whoamiSchema = z.object({ tenant: z.string(), scopes: z.array(z.enum(['admin', 'consume', 'produce', 'read'])) });
