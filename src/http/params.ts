import type { Request } from 'express';

import { InvalidRequestError } from '../domain/errors';

/** The `:batchId` path parameter (routes with middleware lose express's inferred param types). */
export const batchIdOf = (req: Request): string => String(req.params.batchId ?? '');

/**
 * The query string as express's "simple" parser (Node's querystring) reads it: `+` is a space, and a
 * name given twice gives an array (which the schemas refuse). But a %-escape that does not decode as
 * UTF-8 is 400: Node's parser made it U+FFFD, so `?userKey=%FF` and `?userKey=%FE` both listed the
 * batches whose key is "\uFFFD", where two keys must never become one (docs/api.md).
 */
export function strictQuery(text: string | null | undefined): Record<string, string | string[]> {
  const query: Record<string, string | string[]> = Object.create(null) as Record<string, string | string[]>;
  for (const pair of (text ?? '').split('&')) {
    if (pair === '') continue;
    const at = pair.indexOf('=');
    const name = decodedQueryPart(at === -1 ? pair : pair.slice(0, at));
    const value = at === -1 ? '' : decodedQueryPart(pair.slice(at + 1));
    const before = query[name];
    query[name] = before === undefined ? value : [...(Array.isArray(before) ? before : [before]), value];
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
