import { Knex } from 'knex';

import * as m0001 from './0001_create_batches';
import * as m0002 from './0002_create_item_groups';
import * as m0003 from './0003_create_add_requests';
import * as m0004 from './0004_create_outbox';
import * as m0005 from './0005_index_batches_for_sweep';
import * as m0006 from './0006_add_batch_tenant';
import * as m0007 from './0007_exact_identifier_collation';
import * as m0008 from './0008_outbox_tenant_and_host';
import * as m0009 from './0009_add_batch_cancelled_at';
import * as m0010 from './0010_add_batch_parent';
import * as m0011 from './0011_create_failure_reasons';
import * as m0012 from './0012_create_child_outcomes';
import * as m0013 from './0013_create_child_links';
import * as m0014 from './0014_distribute_on_citus';
import * as m0015 from './0015_text_in_utf8mb4';
import * as m0016 from './0016_index_outbox_by_event';
import * as m0017 from './0017_index_outbox_for_shares';
import * as m0018 from './0018_index_batches_by_tenant_state';
import * as m0019 from './0019_outbox_first_attempt';
import * as m0020 from './0020_index_batches_by_tenant_user_key';
import * as m0021 from './0021_index_child_outcomes_by_tenant';
import * as m0022 from './0022_index_batches_by_two_filters';
import * as m0023 from './0023_index_outbox_terminal_due';
import * as m0024 from './0024_index_batches_by_parent_and_user_key';

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
  ['0004_create_outbox', m0004],
  ['0005_index_batches_for_sweep', m0005],
  ['0006_add_batch_tenant', m0006],
  ['0007_exact_identifier_collation', m0007],
  ['0008_outbox_tenant_and_host', m0008],
  ['0009_add_batch_cancelled_at', m0009],
  ['0010_add_batch_parent', m0010],
  ['0011_create_failure_reasons', m0011],
  ['0012_create_child_outcomes', m0012],
  ['0013_create_child_links', m0013],
  ['0014_distribute_on_citus', m0014],
  ['0015_text_in_utf8mb4', m0015],
  ['0016_index_outbox_by_event', m0016],
  ['0017_index_outbox_for_shares', m0017],
  ['0018_index_batches_by_tenant_state', m0018],
  ['0019_outbox_first_attempt', m0019],
  ['0020_index_batches_by_tenant_user_key', m0020],
  ['0021_index_child_outcomes_by_tenant', m0021],
  ['0022_index_batches_by_two_filters', m0022],
  ['0023_index_outbox_terminal_due', m0023],
  ['0024_index_batches_by_parent_and_user_key', m0024],
];
