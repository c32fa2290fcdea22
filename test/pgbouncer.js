// A PgBouncer of the test run's own, for TEST_PGBOUNCER=1 (globalSetup starts it, globalTeardown
// stops it): Debian's pgbouncer on a free port in front of TEST_PG_URL's server, pooling in
// `transaction` mode, as teams run it in front of PostgreSQL. The `pgbouncer` backend
// (test/helpers/backends.ts) runs the suites through it. Without pgbouncer this fails, it never skips.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { accepting, freePort } = require('./localPorts');

const PGBOUNCER = '/usr/sbin/pgbouncer';

/**
 * Starts PgBouncer in front of the server of `serverUrl`, trusting its user (the server must trust
 * it too: the user list holds no password, as the test servers' trust auth needs none). Its pool per
 * database has room for the suites' several service processes at once, so a test waits for a lock,
 * not for a server session; what a smaller pool does is the pooler's business, not rollcall's.
 */
async function startPgbouncer(serverUrl) {
  if (!fs.existsSync(PGBOUNCER)) throw new Error(`TEST_PGBOUNCER=1 needs ${PGBOUNCER} (Debian's package pgbouncer; .ci/run installs it)`);
  const server = new URL(serverUrl);
  const user = decodeURIComponent(server.username || 'postgres');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-pgbouncer-'));
  const port = await freePort();
  fs.writeFileSync(path.join(dir, 'userlist.txt'), `"${user}" ""\n`);
  fs.writeFileSync(
    path.join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${path.join(dir, 'userlist.txt')}`,
      'pool_mode = transaction',
      'default_pool_size = 60',
      'max_client_conn = 2000',
      `logfile = ${path.join(dir, 'pgbouncer.log')}`,
      '',
    ].join('\n'),
  );
  // PgBouncer refuses to run as root: as root, it switches to the postgres user itself (`-u`), so
  // that the process started is PgBouncer and a signal reaches it at once (runuser held a SIGTERM
  // for two seconds).
  const asRoot = process.getuid && process.getuid() === 0;
  if (asRoot) fs.chownSync(dir, ...uidGidOf('postgres'));
  for (const file of fs.readdirSync(dir)) if (asRoot) fs.chownSync(path.join(dir, file), ...uidGidOf('postgres'));
  const args = [...(asRoot ? ['-u', 'postgres'] : []), path.join(dir, 'pgbouncer.ini')];
  const child = spawn(PGBOUNCER, args, { stdio: 'ignore' });
  const deadline = Date.now() + 20_000;
  while (!(await accepting(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      const log = fs.existsSync(path.join(dir, 'pgbouncer.log')) ? fs.readFileSync(path.join(dir, 'pgbouncer.log'), 'utf8') : '';
      throw new Error(`PgBouncer did not start on port ${port}:\n${log}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const url = new URL(serverUrl);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return { child, dir, url: url.toString() };
}

function uidGidOf(user) {
  const line = fs
    .readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((entry) => entry.startsWith(`${user}:`));
  if (!line) throw new Error(`no user ${user} to run PgBouncer as`);
  const [, , uid, gid] = line.split(':');
  return [Number(uid), Number(gid)];
}

/**
 * Stops it (SIGTERM: PgBouncer's immediate shutdown) and removes its files. The wait's timer is
 * cleared once PgBouncer is gone: left running, it kept Jest's process alive for its five seconds
 * after the run ("Jest did not exit one second after the test run has completed").
 */
async function stopPgbouncer(bouncer) {
  const exited = new Promise((resolve) => (bouncer.child.exitCode !== null ? resolve() : bouncer.child.once('exit', resolve)));
  bouncer.child.kill('SIGTERM');
  let timer;
  await Promise.race([exited, new Promise((resolve) => (timer = setTimeout(resolve, 5000)))]);
  clearTimeout(timer);
  fs.rmSync(bouncer.dir, { recursive: true, force: true });
}

module.exports = { startPgbouncer, stopPgbouncer };
