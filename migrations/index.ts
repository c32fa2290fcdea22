import { Knex } from 'knex';
import * as m0001 from './0001_create_batches';
import * as m0002 from './0002_create_item_groups';
import * as m0003 from './0003_create_add_requests';

export interface Migration {
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
}

/**
 * Every migration, in order. Append only: a migration that has landed is never edited, renamed
 * or reordered; a change to the schema is a new numbered file added at the end.
 */
export const migrations: ReadonlyArray<readonly [name: string, migration: Migration]> = [
  ['0001_create_batches', m0001],
  ['0002_create_item_groups', m0002],
  ['0003_create_add_requests', m0003],
];
