import { Knex } from 'knex';
import { v7 as uuidv7 } from 'uuid';

import { Migration, migrations } from '../../migrations';
import { DatabaseEncodingError } from '../../src/domain/errors';
import { createRollcall } from '../../src/rollcall';
import { openDb } from '../../src/store/db';
import { describeEachOrSkip, latin1MysqlBackend, latin1PgBackend } from '../helpers/backends';
import { Receiver } from '../helpers/receiver';
import { serve, startService, TestService } from '../helpers/service';

/** The migrations of the release before text went to utf8mb4 (0015_text_in_utf8mb4). */
const EARLIER_RELEASE: Knex.MigratorConfig = {
  tableName: 'rollcall_migrations',
  migrationSource: {
    getMigrations: async () =>
      migrations.slice(
        0,
        migrations.findIndex(([name]) => name === '0015_text_in_utf8mb4'),
      ),
    getMigrationName: ([name]: readonly [string, Migration]) => name,
    getMigration: async ([, migration]: readonly [string, Migration]) => migration,
  },
};

/**
 * A MariaDB whose default character set is latin1 (upstream MariaDB before 11.6): tables made
 * without one took it, and text a latin1 column cannot hold (not Latin-1: CJK, emoji) was refused
 * by the server (1366), answered `500`; a completion whose callback payload held it could never
 * commit, so its batch's last ack failed for good.
 */
describeEachOrSkip(latin1MysqlBackend() ? [['mariadb, latin1 by default', latin1MysqlBackend()!] as const] : [])(
  'text beyond Latin-1 on a database whose default character set is latin1 (%s)',
  (_name, backend) => {
    let svc: TestService;
    const receiver = new Receiver();
    beforeAll(async () => {
      await receiver.start();
      svc = await startService(backend);
    });
    afterAll(async () => {
      await svc.stop();
      await receiver.stop();
    });

    it('when a batch carries CJK and emoji in its metadata, user key, callback and failure reasons, then each is kept exactly and the batch completes', async () => {
      const metadata = { title: '日本語のバッチ', mood: '☕💥', plain: 'café' };
      const userKey = 'café ☕ 日本';
      const callbackUrl = `${receiver.url}/完了/☕`;
      const opened = await svc.api.post('/v1/batches').send({ metadata, userKey, callbackUrl });
      expect(opened.status).toBe(201);
      const id = opened.body.id as string;
      const added = await svc.api.post(`/v1/batches/${id}/items`).send({ count: 2 });
      expect(added.status).toBe(201);
      const group = added.body.groups[0].id as string;
      expect((await svc.api.post(`/v1/batches/${id}/seal`).send({})).status).toBe(200);

      const reason = 'タイムアウト 💥 (ошибка)';
      const failed = await svc.api.post('/v1/acks').send({ ids: [`${id}:${group}:0`], outcome: 'failed', error: reason });
      expect([failed.status, failed.body.acked]).toEqual([200, 1]);
      const completing = await svc.api.post('/v1/acks').send({ ids: [`${id}:${group}:1`] });
      expect([completing.status, completing.body.completed.map((b: { id: string }) => b.id)]).toEqual([200, [id]]);

      expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ state: 'complete', metadata, userKey, failed: 1 });
      expect((await svc.api.get(`/v1/batches/${id}/failures`)).body.failures.map((f: { error: string }) => f.error)).toEqual([reason]);
      // Its two callbacks (the first failure, the completion) reach the URL, each carrying the batch.
      expect(await svc.rollcall.dispatcher.deliverDue()).toBe(2);
      const delivered = receiver.deliveries.map((d) => JSON.parse(d.body) as { event: string; batch: { id: string; userKey: string; metadata: unknown } });
      expect(delivered.map((d) => [d.event, d.batch.id, d.batch.userKey, d.batch.metadata]).sort()).toEqual([
        ['batch.completed', id, userKey, metadata],
        ['batch.first_failure', id, userKey, metadata],
      ]);
    });

    it('when a database an earlier release made holds Latin-1 text, then the upgrade keeps it, and text beyond Latin-1 is taken after', async () => {
      const database = await backend.create();
      try {
        const earlier = openDb(database.config);
        const id = uuidv7();
        try {
          await earlier.migrate.latest(EARLIER_RELEASE);
          const now = Date.now();
          await earlier('batches').insert({
            id,
            state: 'open',
            user_key: 'crème',
            metadata: JSON.stringify({ plain: 'café' }),
            created_at: now,
            updated_at: now,
          });
        } finally {
          await earlier.destroy();
        }
        const upgraded = await serve(await createRollcall(database.config));
        try {
          expect((await upgraded.api.get(`/v1/batches/${id}`)).body).toMatchObject({ userKey: 'crème', metadata: { plain: 'café' } });
          const opened = await upgraded.api.post('/v1/batches').send({ userKey: '☕', metadata: { title: '日本語' } });
          expect([opened.status, opened.body.metadata]).toEqual([201, { title: '日本語' }]);
        } finally {
          await upgraded.stop();
        }
      } finally {
        await database.drop();
      }
    });
  },
);

/**
 * A PostgreSQL database made in LATIN1 holds no text beyond it, whatever its columns (the encoding
 * is the database's): text beyond it was answered `500`. rollcall does not start on one.
 */
describeEachOrSkip(latin1PgBackend() ? [['postgresql, LATIN1', latin1PgBackend()!] as const] : [])(
  'a PostgreSQL database that cannot hold every character (%s)',
  (_name, backend) => {
    it('when rollcall starts on a database made in LATIN1, then it refuses, naming the encoding, and makes no table', async () => {
      const database = await backend.create();
      try {
        const started = await createRollcall(database.config).then(
          async (rollcall) => (await rollcall.close(), 'started'),
          (error: unknown) => error,
        );
        expect(started).toBeInstanceOf(DatabaseEncodingError);
        expect((started as Error).message).toMatch(/^the database's encoding is LATIN1, not UTF8, /);
        const db = openDb(database.config);
        try {
          expect(await db.schema.hasTable('batches')).toBe(false);
        } finally {
          await db.destroy();
        }
      } finally {
        await database.drop();
      }
    });
  },
);
