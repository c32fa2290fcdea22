import knex, { Knex } from 'knex';

import { isPostgresBackend, TestDatabase } from './backends';

/** A pool of its own on a test's MariaDB or PostgreSQL database: the connections of another replica. */
export function otherConnections(database: TestDatabase, max = 1): Knex {
  const url = database.config.DATABASE_URL as string;
  const pg = isPostgresBackend(database.name);
  return knex({ client: pg ? 'pg' : 'mysql2', connection: (pg ? { connectionString: url } : { uri: url }) as never, pool: { min: 0, max } });
}

/** Holds batch `id`'s row lock on `other` (as a stuck replica would) until the returned function is called. */
export async function holdBatchRow(other: Knex, id: string): Promise<() => Promise<void>> {
  const trx = await other.transaction();
  await trx('batches').where({ id }).forUpdate();
  return async () => {
    if (!trx.isCompleted()) await trx.rollback();
  };
}
