import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Client } from 'pg';

import { freePorts } from './ports';

/**
 * The newest PostgreSQL server installed from Debian's packages (its programs are not on PATH):
 * the version differs from one Debian release to the next (15 on bookworm, 17 on trixie).
 */
function serverPrograms(): string {
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root) ? fs.readdirSync(root).filter((name) => /^\d+$/.test(name)) : [];
  const bins = versions.sort((a, b) => Number(b) - Number(a)).map((version) => path.join(root, version, 'bin'));
  return bins.find((bin) => fs.existsSync(path.join(bin, 'postgres')) && fs.existsSync(path.join(bin, 'initdb'))) ?? path.join(root, '15', 'bin');
}

const BIN = serverPrograms();

export const privatePostgresAvailable = () => fs.existsSync(path.join(BIN, 'postgres')) && fs.existsSync(path.join(BIN, 'initdb'));

/** PostgreSQL refuses to run as root: as root, its programs run as the postgres user. */
const asPostgres = (program: string, args: string[]): [string, string[]] =>
  process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', path.join(BIN, program), ...args]] : [path.join(BIN, program), args];

/**
 * A PostgreSQL cluster of a test's own (own data directory and port, trust auth), so the test can
 * stop and restart it without touching the server other tests use. Like PrivateMariadb.
 */
export class PrivatePostgres {
  private child: ChildProcess | null = null;
  readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-postgres-'));
  port = 0;

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  async start(): Promise<void> {
    const data = path.join(this.dir, 'data');
    if (!fs.existsSync(data)) {
      if (process.getuid?.() === 0) execFileSync('chown', ['postgres:postgres', this.dir]);
      const [cmd, args] = asPostgres('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync']);
      execFileSync(cmd, args, { stdio: 'ignore' });
      [this.port] = (await freePorts(1)) as [number];
    }
    const [cmd, args] = asPostgres('postgres', [
      '-D',
      data,
      '-p',
      String(this.port),
      '-h',
      '127.0.0.1',
      '-k',
      this.dir,
      '-c',
      'fsync=off',
      '-c',
      'shared_buffers=32MB',
    ]);
    this.child = spawn(cmd, args, { stdio: 'ignore' });
    const deadline = Date.now() + 30_000;
    while (!(await this.answering())) {
      if (Date.now() > deadline) throw new Error('private PostgreSQL did not start');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /**
   * Whether the server runs a query. An accepted TCP connection is not enough: while it replays its
   * log after a stop, PostgreSQL accepts connections and refuses each with "the database system is
   * starting up" (a CI run's CREATE DATABASE failed so).
   */
  private async answering(): Promise<boolean> {
    const client = new Client({ connectionString: this.url, connectionTimeoutMillis: 2000 });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query('SELECT 1');
      return true;
    } catch {
      return false;
    } finally {
      await client.end().catch(() => {});
    }
  }

  /**
   * Stops the server and waits for it to exit. SIGTERM, through runuser, reaches the postmaster as
   * a "smart" shutdown; a crash is SIGKILL of the whole process group.
   */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const pidFile = path.join(this.dir, 'data', 'postmaster.pid');
    const postmaster = fs.existsSync(pidFile) ? Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]) : 0;
    // SIGINT is PostgreSQL's "fast" shutdown: it ends open sessions at once, as a restart does.
    if (postmaster > 0) process.kill(postmaster, signal === 'SIGTERM' ? 'SIGINT' : signal);
    else child.kill(signal);
    await exited;
    this.child = null;
  }

  async destroy(): Promise<void> {
    await this.stop('SIGKILL');
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
