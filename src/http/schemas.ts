import { z } from 'zod';

import { EXACT_TEXT_RULE, isExactText, withThousands } from '../contract/text';
import { BATCH_STATES, MAX_ACK_IDS, MAX_ERROR_LENGTH, OUTCOMES } from '../contract/vocabulary';

export { MAX_ACK_IDS };

/** Request shapes of the HTTP contract. Each schema is also the type of what the route passes on. */

export const MAX_METADATA_BYTES = 4096;
export const MAX_ADD_COUNT = 10_000_000;
export const MAX_METADATA_DEPTH = 32;

/**
 * The most values (objects, arrays, scalars) a JSON text of MAX_METADATA_BYTES can write: each
 * takes at least a character and a separator. Past it the value is too large, whatever its shape.
 */
const MAX_METADATA_VALUES = MAX_METADATA_BYTES / 2 + 1;

const TOO_LARGE = `must be at most ${MAX_METADATA_BYTES} bytes as JSON`;

/**
 * What is wrong with parsed JSON as metadata, in one walk that stops at the first problem: nesting
 * past MAX_METADATA_DEPTH, a number JSON text can write but a double cannot hold (`1e400` parses as
 * Infinity, which would be stored as null), or more values than MAX_METADATA_BYTES can hold (counted
 * as children are reached, so a 2 MB array of a million zeros costs a look at its length, not a walk
 * of 150 ms). Iterative: a body of a few thousand levels would overflow the stack of any recursive
 * walk (JSON.stringify included). Only a value that passes is serialised to measure its size.
 */
export function metadataProblem(value: unknown): string | null {
  const stack: Array<[unknown, number]> = [[value, 1]];
  let values = 1;
  while (stack.length > 0) {
    const [node, depth] = stack.pop() as [unknown, number];
    if (typeof node === 'number' && !Number.isFinite(node)) return 'numbers must fit a 64-bit double (1e400 does not)';
    if (typeof node !== 'object' || node === null) continue;
    if (depth > MAX_METADATA_DEPTH) return `must nest at most ${MAX_METADATA_DEPTH} levels deep`;
    if (Array.isArray(node)) {
      values += node.length;
      if (values > MAX_METADATA_VALUES) return TOO_LARGE;
      for (const child of node) stack.push([child, depth + 1]);
    } else {
      for (const key in node) {
        if (++values > MAX_METADATA_VALUES) return TOO_LARGE;
        stack.push([(node as Record<string, unknown>)[key], depth + 1]);
      }
    }
  }
  return Buffer.byteLength(JSON.stringify(value)) > MAX_METADATA_BYTES ? TOO_LARGE : null;
}

const isJsonObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * Any JSON object, kept as parsed: a record schema would copy it into a new object, where a
 * `"__proto__"` key sets the prototype instead of a property, and is silently lost (metadataProblem).
 */
const metadata = z
  .custom<Record<string, unknown>>(isJsonObject, 'must be a JSON object')
  .meta({ type: 'object' })
  .superRefine((value, ctx) => {
    const problem = metadataProblem(value);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
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
