import { Knex } from 'knex';

/** Remembers the answer to each add made with an Idempotency-Key, so a retry creates nothing. */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('add_requests', (t) => {
    t.string('batch_id', 36).notNullable();
    t.string('idempotency_key', 255).notNullable();
    t.bigInteger('count').notNullable();
    // A 10M-item add answers with ~1,221 groups (~75 KB of JSON): more than MySQL's TEXT holds.
    t.text('response', 'mediumtext').notNullable();
    t.bigInteger('created_at').notNullable();
    t.primary(['batch_id', 'idempotency_key']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('add_requests');
}
