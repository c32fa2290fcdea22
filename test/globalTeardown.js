// Stops the private Citus cluster of TEST_CITUS=1 and the PgBouncer of TEST_PGBOUNCER=1 (globalSetup.js).
const fs = require('node:fs');

const { stopCitusCluster } = require('./citusCluster');
const { stopPgbouncer } = require('./pgbouncer');

module.exports = async () => {
  if (globalThis.pgbouncer) await stopPgbouncer(globalThis.pgbouncer);
  const cluster = globalThis.citusCluster;
  if (!cluster) return;
  stopCitusCluster(cluster);
  await new Promise((r) => setTimeout(r, 1000));
  fs.rmSync(cluster.dir, { recursive: true, force: true });
};
