import { Knex } from 'knex';

/**
 * Lets the child-outcome dispatcher's read leave out a tenant whose backlog crowds the oldest due
 * rows by index ranges (store/childOutcomes.ts dueChildOutcomes) instead of walking that backlog
 * row by row to reach the other tenants' rows.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('child_outcomes', (t) => {
    t.index(['tenant', 'next_attempt_at'], 'child_outcomes_due_by_tenant');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('child_outcomes', (t) => {
    t.dropIndex(['tenant', 'next_attempt_at'], 'child_outcomes_due_by_tenant');
  });
}
