import type { Request } from 'express';

/** The `:batchId` path parameter (routes with middleware lose express's inferred param types). */
export const batchIdOf = (req: Request): string => String(req.params.batchId ?? '');
