import knex, { Knex } from 'knex';

import { mysqlBackend } from '../helpers/backends';
import { startService } from '../helpers/service';

const mysql = mysqlBackend();
const describeOnMysql = mysql ? describe : describe.skip;

describeOnMysql('a server whose sql_mode has NO_BACKSLASH_ESCAPES (mysql)', () => {
  let admin: Knex;
  let globalMode: string;
  beforeAll(async () => {
    admin = knex({ client: 'mysql2', connection: { uri: process.env.TEST_MYSQL_URL } as never, pool: { min: 0, max: 1 } });
    [[{ mode: globalMode }]] = (await admin.raw('SELECT @@GLOBAL.sql_mode AS mode')) as [[{ mode: string }]];
  });
  afterAll(() => admin.destroy());

  it('when a userKey is crafted to end its string early, then it is stored as sent, no second statement', async () => {
    // Connections opened from now on start with the unsafe mode; the service must override it.
    await admin.raw("SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES')");
    const svc = await startService(mysql!).finally(() => admin.raw('SET GLOBAL sql_mode = ?', [globalMode]));
    try {
      const bystander = (await svc.api.post('/v1/batches').send({ userKey: 'bystander' })).body.id as string;
      const crafted = "a\\'; DELETE FROM batches; -- ";
      const made = await svc.api.post('/v1/batches').send({ userKey: crafted });
      expect(made.status).toBe(201);
      expect((await svc.api.get(`/v1/batches/${made.body.id}`)).body.userKey).toBe(crafted);
      expect((await svc.api.get('/v1/batches').query({ userKey: crafted })).body.batches).toHaveLength(1);
      expect((await svc.api.get(`/v1/batches/${bystander}`)).status).toBe(200);
    } finally {
      await svc.stop();
    }
  });
});
