import knex, { Knex } from 'knex';

import { loadConfig } from '../../src/config';
import { mysqlBackend } from '../helpers/backends';
import { startService } from '../helpers/service';

const mysql = mysqlBackend();
const describeOnMysql = mysql ? describe : describe.skip;

/** A user of its own, whose sessions start with autocommit off (init_connect runs for users without CONNECTION ADMIN, so not for the tests' root). */
const USER = 'rollcall_noautocommit';

describeOnMysql('a server whose sessions start with autocommit off (mysql)', () => {
  let admin: Knex;
  let initConnect: string;
  beforeAll(async () => {
    admin = knex({ client: 'mysql2', connection: { uri: process.env.TEST_MYSQL_URL } as never, pool: { min: 0, max: 1 } });
    [[{ value: initConnect }]] = (await admin.raw('SELECT @@GLOBAL.init_connect AS value')) as [[{ value: string }]];
    await admin.raw(`CREATE USER IF NOT EXISTS '${USER}'@'%' IDENTIFIED BY 'x'`);
    await admin.raw(`CREATE USER IF NOT EXISTS '${USER}'@'localhost' IDENTIFIED BY 'x'`);
    // This user's sessions alone: other tests' users (a jest worker may connect as one meanwhile) keep theirs.
    await admin.raw('SET GLOBAL init_connect = ?', [`SET autocommit = IF(CURRENT_USER() LIKE '${USER}@%', 0, @@autocommit)`]);
  });
  afterAll(async () => {
    await admin.raw('SET GLOBAL init_connect = ?', [initConnect]);
    await admin.raw(`DROP USER IF EXISTS '${USER}'@'%'`);
    await admin.raw(`DROP USER IF EXISTS '${USER}'@'localhost'`);
    await admin.destroy();
  });

  it('when a batch is opened (a write outside a transaction), then it is committed: another connection sees it', async () => {
    const asUser = {
      name: mysql!.name,
      async create(overrides: Record<string, string> = {}) {
        const database = await mysql!.create(overrides);
        const url = new URL(database.config.DATABASE_URL as string);
        await admin.raw(`GRANT ALL ON \`${url.pathname.slice(1)}\`.* TO '${USER}'@'%', '${USER}'@'localhost'`);
        Object.assign(url, { username: USER, password: 'x' });
        return { ...database, config: loadConfig({ ...overrides, LOG_LEVEL: 'silent', DATABASE_URL: url.toString() }) };
      },
    };
    const database = await asUser.create();
    const plain = knex({ client: 'mysql2', connection: { uri: database.config.DATABASE_URL } as never, pool: { min: 0, max: 1 } });
    try {
      const [[{ autocommit }]] = (await plain.raw('SELECT @@autocommit AS autocommit')) as [[{ autocommit: number }]];
      expect(Number(autocommit)).toBe(0); // the server's doing, which the service's sessions must undo
    } finally {
      await plain.destroy();
      await database.drop();
    }
    const svc = await startService(asUser);
    try {
      const [[{ autocommit }]] = (await svc.rollcall.db.raw('SELECT @@autocommit AS autocommit')) as [[{ autocommit: number }]];
      expect(Number(autocommit)).toBe(1);
      const made = await svc.api.post('/v1/batches').send({});
      expect(made.status).toBe(201);
      const schema = new URL(svc.database.config.DATABASE_URL as string).pathname.slice(1);
      const [[{ n }]] = (await admin.raw(`SELECT count(*) AS n FROM \`${schema}\`.batches WHERE id = ?`, [made.body.id])) as [[{ n: number }]];
      expect(Number(n)).toBe(1);
    } finally {
      await svc.stop();
    }
  });
});
