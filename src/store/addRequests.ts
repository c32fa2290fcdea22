import { Knex } from 'knex';

export interface AddAnswer {
  batchId: string;
  total: number;
  groups: Array<{ id: string; size: number }>;
}

export interface StoredAdd {
  count: number;
  answer: AddAnswer;
}

/**
 * Finds the answer stored for an earlier add with this Idempotency-Key: under the batch row lock,
 * or without it to learn early that an add is a repeat. Keys compare byte for byte: the column's
 * collation is binary (migration 0007), and the key is compared again here so a lax collation can
 * never hand one key's answer to another.
 */
export async function findAddRequest(db: Knex, batchId: string, key: string): Promise<StoredAdd | null> {
  const row = (await db('add_requests').where({ batch_id: batchId, idempotency_key: key }).first()) as
    { idempotency_key: string; count: number | string; response: string } | undefined;
  if (!row || row.idempotency_key !== key) return null;
  return { count: Number(row.count), answer: JSON.parse(row.response) as AddAnswer };
}

/** Stores the answer of an add made with an Idempotency-Key, in the transaction that made it. */
export async function insertAddRequest(trx: Knex.Transaction, key: string, count: number, answer: AddAnswer, now: number): Promise<void> {
  await trx('add_requests').insert({
    batch_id: answer.batchId,
    idempotency_key: key,
    count,
    response: JSON.stringify(answer),
    created_at: now,
  });
}
