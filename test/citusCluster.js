// A Citus cluster of the test run's own, for TEST_CITUS=1 (globalSetup starts it, globalTeardown
// stops it): a coordinator and two workers, each a PostgreSQL 15 cluster in a temp dir on a free
// port, with shared_preload_libraries=citus. Citus is not in Debian's packages: it must have been
// built and installed locally (docs/scaling.md); without it this fails, it never skips.
const { execFileSync, spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { accepting, freePort } = require('./localPorts');

const BIN = '/usr/lib/postgresql/15/bin';
const asPostgres = (program, args) =>
  process.getuid && process.getuid() === 0 ? ['runuser', ['-u', 'postgres', '--', path.join(BIN, program), ...args]] : [path.join(BIN, program), args];

function psql(port, sql) {
  execFileSync('psql', ['-qAt', '-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-d', 'postgres', '-v', 'ON_ERROR_STOP=1', '-c', sql], {
    stdio: 'pipe',
  });
}

/** Whether the node runs a query: while it starts up, PostgreSQL accepts connections and refuses each ("the database system is starting up"). */
function answering(port) {
  try {
    psql(port, 'SELECT 1');
    return true;
  } catch {
    return false;
  }
}

async function startNode(dir, name) {
  const data = path.join(dir, name);
  const [initCmd, initArgs] = asPostgres('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync']);
  execFileSync(initCmd, initArgs, { stdio: 'ignore' });
  const port = await freePort();
  const [cmd, args] = asPostgres('postgres', [
    '-D',
    data,
    '-p',
    String(port),
    '-h',
    '127.0.0.1',
    '-k',
    dir,
    '-c',
    'fsync=off',
    '-c',
    'shared_preload_libraries=citus',
    '-c',
    'max_prepared_transactions=200',
    '-c',
    'max_connections=300',
  ]);
  const child = spawn(cmd, args, { stdio: 'ignore', detached: true });
  const deadline = Date.now() + 30_000;
  while (!((await accepting(port)) && answering(port))) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`Citus node ${name} did not start (is Citus installed? docs/scaling.md)`);
    await new Promise((r) => setTimeout(r, 100));
  }
  psql(port, 'CREATE EXTENSION citus');
  return { port, data };
}

async function startCitusCluster() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-citus-'));
  if (process.getuid && process.getuid() === 0) execFileSync('chown', ['postgres:postgres', dir]);
  const [coordinator, ...workers] = [await startNode(dir, 'coordinator'), await startNode(dir, 'worker1'), await startNode(dir, 'worker2')];
  psql(coordinator.port, `SELECT citus_set_coordinator_host('127.0.0.1', ${coordinator.port})`);
  for (const worker of workers) psql(coordinator.port, `SELECT citus_add_node('127.0.0.1', ${worker.port})`);
  return { url: `postgres://postgres@127.0.0.1:${coordinator.port}/postgres`, dir, nodes: [coordinator, ...workers] };
}

function stopCitusCluster(cluster) {
  for (const node of cluster.nodes) {
    const pidFile = path.join(node.data, 'postmaster.pid');
    if (fs.existsSync(pidFile)) process.kill(Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]), 'SIGINT');
  }
}

module.exports = { startCitusCluster, stopCitusCluster };
