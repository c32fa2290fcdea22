import { Knex } from 'knex';

/**
 * `column <> value` as the two ranges around it (the column is NOT NULL), which an index leading
 * with the column (after any equalities) serves: PostgreSQL plans no index range for `<>` or
 * `NOT IN`, and without one a read walked the whole backlog of the tenant or host it left out.
 */
export const outside = (column: string, value: string) => (around: Knex.QueryBuilder) => around.where(column, '<', value).orWhere(column, '>', value);
