import type { Request } from 'express';

import { InvalidRequestError } from '../domain/errors';

/** The `:batchId` path parameter (routes with middleware lose express's inferred param types). */
export const batchIdOf = (req: Request): string => String(req.params.batchId ?? '');

/** Parameters a query string may hold (strictQuery). */
const MAX_QUERY_PAIRS = 1000;

/**
 * The query string as express's "simple" parser (Node's querystring) reads it: `+` is a space, and a
 * name given twice gives an array (which the schemas refuse). But a %-escape that does not decode as
 * UTF-8 is 400: Node's parser made it U+FFFD, so `?userKey=%FF` and `?userKey=%FE` both listed the
 * batches whose key is "\uFFFD", where two keys must never become one (docs/api.md).
 */
export function strictQuery(text: string | null | undefined): Record<string, string | string[]> {
  const query: Record<string, string | string[]> = Object.create(null) as Record<string, string | string[]>;
  const pairs = (text ?? '').split('&');
  // Node's parser read the first 1,000 and dropped the rest; no route takes more than a few.
  if (pairs.length > MAX_QUERY_PAIRS) throw new InvalidRequestError(`a query string may hold at most ${MAX_QUERY_PAIRS} parameters`);
  for (const pair of pairs) {
    if (pair === '') continue;
    const at = pair.indexOf('=');
    const name = decodedQueryPart(at === -1 ? pair : pair.slice(0, at));
    const value = at === -1 ? '' : decodedQueryPart(pair.slice(at + 1));
    const before = query[name];
    if (before === undefined) query[name] = value;
    else if (Array.isArray(before)) before.push(value);
    else query[name] = [before, value];
  }
  return query;
}

function decodedQueryPart(part: string): string {
  try {
    return decodeURIComponent(part.replace(/\+/g, ' '));
  } catch {
    throw new InvalidRequestError(`the query string's "${part.slice(0, 100)}" is not UTF-8 percent-encoding`);
  }
}
