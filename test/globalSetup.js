// Compiles the dashboard's browser script once before the tests (the service serves it), and with
// TEST_CITUS=1 starts a private Citus cluster whose coordinator the tests reach as TEST_CITUS_URL.
const { execFileSync } = require('node:child_process');
const path = require('node:path');

const { startCitusCluster } = require('./citusCluster');

module.exports = async () => {
  const root = path.resolve(__dirname, '..');
  execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'dashboard/tsconfig.json'], { cwd: root, stdio: 'inherit' });
  if (process.env.TEST_CITUS === '1' && !process.env.TEST_CITUS_URL) {
    globalThis.citusCluster = await startCitusCluster();
    process.env.TEST_CITUS_URL = globalThis.citusCluster.url;
  }
};
