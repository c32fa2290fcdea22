import { z } from 'zod';

import * as res from '../contract/responses';
import { withThousands } from '../contract/text';
import * as req from './schemas';

type JsonObject = Record<string, unknown>;

/** The named schemas, converted once; references between them become `#/components/schemas/<name>`. */
function componentSchemas(): Record<string, JsonObject> {
  const convert = (entries: Record<string, z.ZodType>, io: 'input' | 'output') => {
    const registry = z.registry<{ id: string }>();
    for (const [id, schema] of Object.entries(entries)) registry.add(schema, { id });
    const { schemas } = z.toJSONSchema(registry, { target: 'draft-2020-12', io, unrepresentable: 'any', uri: (id) => `#/components/schemas/${id}` });
    return Object.fromEntries(Object.entries(schemas).map(([id, s]) => [id, stripSchemaKey(s as JsonObject)]));
  };
  return {
    ...convert(
      {
        Batch: res.batchSchema,
        Error: res.errorSchema,
        BatchPage: res.batchPageSchema,
        AddResult: res.addResultSchema,
        AckResult: res.ackResultSchema,
        Events: res.eventsSchema,
        SweepResult: res.sweepResultSchema,
        Status: res.statusSchema,
        Item: res.itemSchema,
        FailurePage: res.failurePageSchema,
        Whoami: res.whoamiSchema,
      },
      'output',
    ),
    ...convert({ CreateBatch: req.createBatchBody, AddItems: req.addItemsBody, Seal: req.sealBody, Ack: req.ackBody, CompactAck: req.compactAckBody }, 'input'),
  };
}

function stripSchemaKey(schema: JsonObject): JsonObject {
  // Nor `$id`: zod names each schema by its reference (`#/components/schemas/<name>`), and JSON
  // Schema 2020-12 (OpenAPI 3.1's) refuses an `$id` with a fragment; the components' keys name them.
  const { $schema: _schema, $id: _id, ...rest } = schema;
  return rest;
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (name: string) => ({ content: { 'application/json': { schema: ref(name) } } });
const answer = (description: string, name: string) => ({ description, ...json(name) });
const failure = (description: string) => answer(description, 'Error');
const batchId = { name: 'batchId', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } };

type ObjectSchema = { properties: Record<string, JsonObject>; required?: string[] };

/**
 * Query parameters from a zod object schema: each value as the service reads it (`limit` an integer
 * 1–500, default 50; OpenAPI serialises it into the query), required as the request must carry it.
 * The input form alone would say only "a string of digits": no bounds, no default.
 */
function queryParameters(schema: z.ZodObject): JsonObject[] {
  const read = z.toJSONSchema(schema, { io: 'output', unrepresentable: 'any' }) as ObjectSchema;
  const sent = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as ObjectSchema;
  return Object.entries(read.properties).map(([name, s]) => ({ name, in: 'query', required: sent.required?.includes(name) ?? false, schema: s }));
}

/** The OpenAPI 3.1 document of the whole API, generated from the schemas that validate requests. */
export function openApiDocument(): JsonObject {
  /** Every route: the Host check runs before any of them (hostCheck.ts). */
  const misdirected = {
    '421': failure(
      'misdirected_request: a token-less service named by a Host a web page could rebind (on loopback, one not loopback; elsewhere, a DNS name not allowed)',
    ),
  };
  const unauthorized = { '401': failure('unauthorized (when tokens are configured)'), ...misdirected };
  const rateLimited = 'rate_limited, with Retry-After until the window ends: the tenant sent this process TENANT_RATE_LIMIT requests in TENANT_RATE_WINDOW';
  /** A route's own 429, besides the rate limit every API route has. */
  const tooMany = (own: string) => ({ '429': failure(`${own}; or ${rateLimited}`) });
  /** The API's reads (GET). */
  const common = {
    '400': failure('invalid_request'),
    ...unauthorized,
    '403': failure('forbidden'),
    '429': failure(rateLimited),
    '503': failure('unavailable, with Retry-After: database down, LOCK_TIMEOUT passed, retries used up, ack queue full'),
  };
  /** The API's writes (POST, DELETE), which read a JSON body (it may be empty where the request body is optional). */
  const withBody = {
    ...common,
    '413': failure('payload_too_large: a body over BODY_LIMIT'),
    '415': failure('unsupported_media_type: a content type an HTML form can send'),
  };
  /** The body of a write that takes none: empty, `{}`, or nothing (a field is 400). */
  const noFields = { required: false, content: { 'application/json': { schema: { type: 'object', maxProperties: 0 } } } };
  /** The routes an operator may close to the public (PUBLIC_METRICS, PUBLIC_OPENAPI off): a token with scope admin. */
  const closable = { '401': failure('unauthorized, when closed to the public'), '403': failure('forbidden, when closed to the public'), ...misdirected };
  const asset = (summary: string, type: string) => ({
    get: {
      summary,
      security: [],
      responses: {
        '200': { description: summary, content: { [type]: { schema: { type: 'string' } } } },
        '206': { description: 'the part asked for with Range', content: { [type]: { schema: { type: 'string' } } } },
        '412': failure('precondition_failed: an If-Match or If-Unmodified-Since the file does not meet'),
        '416': failure('range_not_satisfiable: a Range beyond the end of the file'),
        ...misdirected,
      },
    },
  });
  return withHeaders({
    openapi: '3.1.0',
    info: { title: 'rollcall', version: '1', description: 'Tracks when a fan-out batch is finished; completion is reported exactly once.' },
    components: {
      schemas: componentSchemas(),
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
    },
    security: [{ bearer: [] }, {}],
    paths: {
      '/v1/batches': {
        post: {
          summary: 'Open a batch',
          requestBody: { required: false, ...json('CreateBatch') },
          responses: {
            '201': answer('the new batch', 'Batch'),
            '404': failure('item_not_found (parentItem)'),
            '409': failure('item_not_pending (parentItem)'),
            ...withBody,
            ...tooMany('quota_exceeded, with Retry-After: the tenant holds TENANT_MAX_BATCHES unfinished batches'),
          },
        },
        get: {
          summary: 'List batches, newest first',
          parameters: queryParameters(req.listQuery),
          responses: { '200': answer('a page of batches', 'BatchPage'), ...common },
        },
      },
      '/v1/batches/{batchId}': {
        get: {
          summary: 'Read a batch',
          parameters: [batchId],
          responses: { '200': answer('the batch', 'Batch'), '404': failure('batch_not_found'), ...common },
        },
        delete: {
          summary: 'Delete a batch with its groups and callbacks',
          parameters: [batchId],
          requestBody: noFields,
          responses: { '204': { description: 'deleted' }, '404': failure('batch_not_found'), ...withBody },
        },
      },
      '/v1/batches/{batchId}/items': {
        post: {
          summary: 'Add items (as groups of up to GROUP_SIZE)',
          parameters: [batchId, { name: 'Idempotency-Key', in: 'header', required: false, schema: { type: 'string', minLength: 1, maxLength: 255 } }],
          requestBody: { required: true, ...json('AddItems') },
          responses: {
            '201': answer('the groups made', 'AddResult'),
            '404': failure('batch_not_found'),
            '409': failure('batch_not_open or idempotency_key_reused'),
            ...withBody,
            ...tooMany("quota_exceeded, with Retry-After: with these items the tenant's unfinished batches would hold more than TENANT_MAX_ITEMS"),
          },
        },
      },
      '/v1/batches/{batchId}/seal': {
        post: {
          summary: 'Seal a batch: no more items',
          parameters: [batchId],
          requestBody: { required: false, ...json('Seal') },
          responses: {
            '200': answer('the batch, sealed or complete', 'Batch'),
            '404': failure('batch_not_found'),
            '409': failure('expected_items_mismatch, or batch_not_open (the batch was cancelled)'),
            ...withBody,
          },
        },
      },
      '/v1/acks': {
        post: {
          summary: 'Record item outcomes (IDs, or the compact form by group with ranges)',
          requestBody: { required: true, content: { 'application/json': { schema: { oneOf: [ref('Ack'), ref('CompactAck')] } } } },
          responses: {
            '200': answer('what this call changed', 'AckResult'),
            ...withBody,
            '413': failure(`payload_too_large: more than ${withThousands(req.MAX_ACK_IDS)} IDs, or a body over BODY_LIMIT`),
          },
        },
      },
      '/v1/batches/{batchId}/wait': {
        get: {
          summary: 'Wait until the batch is complete or cancelled, or the timeout',
          parameters: [batchId, ...queryParameters(req.waitQuery)],
          responses: {
            '200': answer('the batch', 'Batch'),
            '404': failure('batch_not_found'),
            ...common,
            ...tooMany('too_many_waits, with Retry-After: this process holds WAIT_MAX waits, or its tenant half of them'),
          },
        },
      },
      '/v1/batches/{batchId}/cancel': {
        post: {
          summary: 'Cancel a batch (terminal; acks of its items are then rejected as batch_cancelled)',
          parameters: [batchId],
          requestBody: noFields,
          responses: {
            '200': answer('the batch, cancelled (again: unchanged)', 'Batch'),
            '404': failure('batch_not_found'),
            '409': failure('batch_complete'),
            ...withBody,
          },
        },
      },
      '/v1/batches/{batchId}/failures': {
        get: {
          summary: "A batch's kept failure reasons, oldest first (at most FAILURE_REASONS_PER_BATCH; the rest counted in dropped)",
          parameters: [batchId, ...queryParameters(req.failuresQuery)],
          responses: { '200': answer('a page of failure reasons', 'FailurePage'), '404': failure('batch_not_found'), ...common },
        },
      },
      '/v1/items/{itemId}': {
        get: {
          summary: 'One item and its batch state (scope read or consume)',
          parameters: [{ name: 'itemId', in: 'path', required: true, schema: { type: 'string' } }],
          responses: { '200': answer('the item', 'Item'), '404': failure('item_not_found'), ...common },
        },
      },
      '/v1/whoami': {
        get: {
          summary: 'The tenant and scopes of the token in use',
          responses: { '200': answer('who is asking', 'Whoami'), ...unauthorized, '429': failure(rateLimited) },
        },
      },
      '/v1/batches/{batchId}/events': {
        get: {
          summary: 'Callback events of a batch and their delivery state',
          parameters: [batchId],
          responses: { '200': answer('events', 'Events'), '404': failure('batch_not_found'), ...common },
        },
      },
      '/v1/admin/sweep': {
        post: { summary: 'Run one sweep now', requestBody: noFields, responses: { '200': answer('what was removed', 'SweepResult'), ...withBody } },
      },
      '/healthz': { get: { summary: 'Liveness', security: [], responses: { '200': answer('the process runs', 'Status'), ...misdirected } } },
      '/readyz': {
        get: { summary: 'Readiness', security: [], responses: { '200': answer('ready', 'Status'), '503': failure('unavailable'), ...misdirected } },
      },
      '/metrics': {
        get: {
          summary: 'Prometheus metrics',
          responses: { '200': { description: 'text exposition format', content: { 'text/plain': { schema: { type: 'string' } } } }, ...closable },
        },
      },
      '/openapi.json': {
        get: {
          summary: 'This document',
          responses: { '200': { description: 'OpenAPI 3.1', content: { 'application/json': { schema: { type: 'object' } } } }, ...closable },
        },
      },
      '/': asset('The dashboard (HTML; asks for a token with scope read when tokens are configured)', 'text/html'),
      '/dashboard/app.js': asset("The dashboard's script", 'text/javascript'),
      '/dashboard/style.css': asset("The dashboard's style sheet", 'text/css'),
    },
  });
}

const header = (description: string, required = false) => ({ description, required, schema: { type: 'string' } });

/** The headers the service sends, declared on each answer that carries them (a generated client reads them typed). */
const HEADERS = {
  every: { 'X-Request-Id': header("this request's id (the caller's X-Request-Id when it is sane, else a new UUID), as logged", true) },
  api: {
    RateLimit: header("when TENANT_RATE_LIMIT is set: the tenant's requests left in this window and the seconds until it ends (draft-7)"),
    'RateLimit-Policy': header('when TENANT_RATE_LIMIT is set: the limit and its window in seconds (draft-7)'),
  },
  refused: { 'Retry-After': header('seconds to wait before trying again', true) },
  heldBatches: {
    'Rollcall-Held-Batches': header(
      'of a 503 for a lock wait: the ids (comma-separated) of the batches the call named that another connection holds; its acks of the others may go again at once, apart',
    ),
  },
};

/** Adds HEADERS to every answer of `doc`: the id to all, the rate limit's to /v1, Retry-After to each 429 and 503, the held batches to an ack's 503. */
function withHeaders<T extends { paths: object }>(doc: T): T {
  for (const [path, operations] of Object.entries(doc.paths as Record<string, Record<string, { responses: Record<string, JsonObject> }>>)) {
    for (const operation of Object.values(operations)) {
      for (const [status, response] of Object.entries(operation.responses)) {
        // A new object: one answer (the 421 of every route, say) is shared by routes in and out of /v1.
        operation.responses[status] = {
          ...response,
          headers: {
            ...HEADERS.every,
            ...(path.startsWith('/v1/') ? HEADERS.api : {}),
            ...(status === '429' || status === '503' ? HEADERS.refused : {}),
            ...(path === '/v1/acks' && status === '503' ? HEADERS.heldBatches : {}),
          },
        };
      }
    }
  }
  return doc;
}
