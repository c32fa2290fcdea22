// Compiles the dashboard's browser script once before the tests (the service serves it), with
// TEST_CITUS=1 starts a private Citus cluster whose coordinator the tests reach as TEST_CITUS_URL,
// and with TEST_PGBOUNCER=1 a private PgBouncer in front of TEST_PG_URL's server (TEST_PGBOUNCER_URL).
const { execFileSync } = require('node:child_process');
const path = require('node:path');

const { startCitusCluster } = require('./citusCluster');
const { startPgbouncer } = require('./pgbouncer');

module.exports = async () => {
  const root = path.resolve(__dirname, '..');
  execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'dashboard/tsconfig.json'], { cwd: root, stdio: 'inherit' });
  if (process.env.TEST_CITUS === '1' && !process.env.TEST_CITUS_URL) {
    globalThis.citusCluster = await startCitusCluster();
    process.env.TEST_CITUS_URL = globalThis.citusCluster.url;
  }
  if (process.env.TEST_PGBOUNCER === '1' && !process.env.TEST_PGBOUNCER_URL) {
    if (!process.env.TEST_PG_URL) throw new Error('TEST_PGBOUNCER=1 needs TEST_PG_URL: PgBouncer goes in front of that server');
    globalThis.pgbouncer = await startPgbouncer(process.env.TEST_PG_URL);
    process.env.TEST_PGBOUNCER_URL = globalThis.pgbouncer.url;
  }
};
