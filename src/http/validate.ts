import { z } from 'zod';

import { InvalidRequestError } from '../domain/errors';

/** Parses input with a schema; a mismatch is a 400 whose message names the field and the rule. */
export function parse<S extends z.ZodType>(schema: S, value: unknown, what: string): z.infer<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const where = issue && issue.path.length > 0 ? `${what}.${issue.path.join('.')}` : what;
  throw new InvalidRequestError(`${where}: ${issue?.message ?? 'invalid'}`, { cause: result.error });
}
