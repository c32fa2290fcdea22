import { z } from 'zod';

import { EXACT_TEXT_RULE, isExactText, withThousands } from '../contract/text';
import { BATCH_STATES, MAX_ACK_IDS, MAX_ERROR_LENGTH, OUTCOMES } from '../contract/vocabulary';

export { MAX_ACK_IDS };

/** Request shapes of the HTTP contract. Each schema is also the type of what the route passes on. */

export const MAX_METADATA_BYTES = 4096;
export const MAX_ADD_COUNT = 10_000_000;
export const MAX_METADATA_DEPTH = 32;

/**
 * Whether a parsed JSON value nests objects and arrays deeper than `limit`. Iterative: a body of a
 * few thousand levels would overflow the stack of any recursive walk (JSON.stringify included).
 */
export function nestsDeeperThan(value: unknown, limit: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop() as [unknown, number];
    if (typeof node !== 'object' || node === null) continue;
    if (depth > limit) return true;
    for (const child of Object.values(node)) stack.push([child, depth + 1]);
  }
  return false;
}

/**
 * Whether a parsed JSON value holds a number JSON text can write but a double cannot hold
 * (`1e400` parses as Infinity, which would be stored as null). Iterative, as nestsDeeperThan.
 */
export function holdsNonFiniteNumber(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node === 'number' && !Number.isFinite(node)) return true;
    if (typeof node === 'object' && node !== null) for (const child of Object.values(node)) stack.push(child);
  }
  return false;
}

const isJsonObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * Any JSON object, kept as parsed: a record schema would copy it into a new object, where a
 * `"__proto__"` key sets the prototype instead of a property, and is silently lost.
 * Depth is checked before size: measuring the size serialises the value.
 */
const metadata = z
  .custom<Record<string, unknown>>(isJsonObject, 'must be a JSON object')
  .meta({ type: 'object' })
  .superRefine((value, ctx) => {
    if (nestsDeeperThan(value, MAX_METADATA_DEPTH)) {
      ctx.addIssue({ code: 'custom', message: `must nest at most ${MAX_METADATA_DEPTH} levels deep` });
    } else if (holdsNonFiniteNumber(value)) {
      ctx.addIssue({ code: 'custom', message: 'numbers must fit a 64-bit double (1e400 does not)' });
    } else if (Buffer.byteLength(JSON.stringify(value)) > MAX_METADATA_BYTES) {
      ctx.addIssue({ code: 'custom', message: `must be at most ${MAX_METADATA_BYTES} bytes as JSON` });
    }
  });

/** A string the service stores or looks up: one every backend keeps exactly (contract/text.ts). */
const exactText = () => z.string().refine(isExactText, EXACT_TEXT_RULE);

/** The longest host name of a callback URL: DNS's limit, so no reachable host is refused. */
export const MAX_CALLBACK_HOST_LENGTH = 253;

/**
 * Checked as sent, then as a URL: zod's URL check would strip tabs, line breaks and surrounding
 * spaces and store what is left, where the contract keeps strings exact.
 */
const callbackUrl = exactText()
  .max(2048)
  // eslint-disable-next-line no-control-regex -- control characters are what this refuses
  .regex(/^[^\s\u0000-\u001f\u007f]*$/, 'must not contain spaces or control characters')
  .pipe(z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }))
  // zod's check is looser than Node's URL parser (a port of 99999, a host of five numbers): what
  // the service could not call is refused here, not met later as an error of its own (500).
  .refine((url) => URL.canParse(url), { message: 'must be a URL the service can call', abort: true })
  .refine((url) => new URL(url).hostname.length <= MAX_CALLBACK_HOST_LENGTH, `its host name must be at most ${MAX_CALLBACK_HOST_LENGTH} characters`);

export const createBatchBody = z.strictObject({
  userKey: exactText().min(1).max(255).nullish(),
  /** `<batchId>:<groupId>:<index>` of another batch: the new batch is a child standing for that item. */
  parentItem: z.string().max(200).nullish(),
  metadata: metadata.nullish(),
  callbackUrl: callbackUrl.nullish(),
});

export const addItemsBody = z.strictObject({
  count: z.number().int().min(1).max(MAX_ADD_COUNT),
});

export const idempotencyKeyHeader = z.string().min(1).max(255).optional();

/** Cancel and delete take no fields: a body, if any, is `{}` (unknown fields are 400, as everywhere). */
export const noFieldsBody = z.strictObject({});

export const sealBody = z.strictObject({
  expectedItems: z.number().int().min(0).optional(),
});

export const outcome = z.enum(OUTCOMES);

/** Why the items of a failed ack failed; applies to every item of the call. */
const failureError = exactText().max(MAX_ERROR_LENGTH);

/** `error` explains a failure: with outcome succeeded (also the default) it is refused, not ignored. */
const errorOnlyWhenFailed = (body: { outcome?: string; error?: string }) => body.error === undefined || body.outcome === 'failed';
const errorRule = { message: 'error is only allowed with outcome "failed"', path: ['error'] };

/** The ID count is checked before and after parsing (routes/acks.ts), so more than MAX_ACK_IDS answers 413, not 400. */
export const ackBody = z
  .strictObject({
    ids: z.array(z.string()).describe(`item IDs, at most ${withThousands(MAX_ACK_IDS)} (more: 413 payload_too_large)`),
    outcome: outcome.optional(),
    error: failureError.optional().describe('why the items failed: only with outcome "failed" (else 400)'),
  })
  .refine(errorOnlyWhenFailed, errorRule);

const index = z
  .number()
  .int()
  .min(0)
  .max(2 ** 31);

/** The compact form: per group, indexes as numbers or inclusive [from, to] ranges. */
export const compactAckBody = z
  .strictObject({
    groups: z.array(
      z.strictObject({
        batchId: z.string().max(64),
        groupId: z.string().max(64),
        indexes: z
          .array(z.union([index, z.tuple([index, index]).refine(([from, to]) => from <= to, 'a range is [from, to] with from <= to')]))
          .min(1, 'an entry names at least one index'),
      }),
    ),
    outcome: outcome.optional(),
    error: failureError.optional(),
  })
  .refine(errorOnlyWhenFailed, errorRule);

/**
 * A number in a query string as people write one: digits, an optional fraction. Not what
 * `Number()` also reads (`0x2`, `1e1`, an empty or blank value as 0).
 */
const queryNumber = () =>
  z
    .string()
    .regex(/^\d+(\.\d+)?$/, 'must be a decimal number')
    .transform(Number);

export const listQuery = z.strictObject({
  state: z.enum(BATCH_STATES).optional(),
  userKey: exactText().min(1).max(255).optional(),
  // Any 8-4-4-4-12 hex, as every batch id in a path is taken (isUuid): zod's uuid() also asks for a
  // version and variant, so a parent id the rest of the API answers 404 for was 400 here.
  parent: z
    .string()
    .regex(/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/, 'must be a UUID')
    .optional(),
  // The child standing for this item, if any: an item ID, checked by the service as every item ID is.
  parentItem: z.string().min(1).max(200).optional(),
  limit: queryNumber().pipe(z.number().int().min(1).max(500)).default(50),
  cursor: z.string().min(1).max(200).optional(),
});

export const waitQuery = z.strictObject({
  timeout: queryNumber().pipe(z.number().min(0).max(60)).default(30),
});

export const failuresQuery = z.strictObject({
  limit: queryNumber().pipe(z.number().int().min(1).max(500)).default(50),
  cursor: z.string().min(1).max(200).optional(),
});
