import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { accepting, freePorts } from './ports';

const MARIADBD = '/usr/sbin/mariadbd';

export const privateMariadbAvailable = () => fs.existsSync(MARIADBD) && fs.existsSync('/usr/bin/mariadb-install-db');

/**
 * A MariaDB server of a test's own (own datadir and port, no grant tables), so the test can stop
 * and restart it without touching the server other tests use.
 */
export class PrivateMariadb {
  private child: ChildProcess | null = null;
  readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-mariadb-'));
  port = 0;

  /** `options`: more server options, such as `--log-bin` (a server set up otherwise than the shared one). */
  constructor(private readonly options: string[] = []) {}

  get url(): string {
    return `mysql://root@127.0.0.1:${this.port}/rollcall`;
  }

  async start(): Promise<void> {
    if (!fs.existsSync(path.join(this.dir, 'data'))) {
      execFileSync('mariadb-install-db', ['--no-defaults', `--datadir=${this.dir}/data`, '--user=root', '--skip-test-db'], { stdio: 'ignore' });
      [this.port] = (await freePorts(1)) as [number];
    }
    this.child = spawn(
      MARIADBD,
      [
        '--no-defaults',
        `--datadir=${this.dir}/data`,
        `--port=${this.port}`,
        '--bind-address=127.0.0.1',
        `--socket=${this.dir}/sock`,
        `--pid-file=${this.dir}/pid`,
        '--user=root',
        '--skip-grant-tables',
        '--innodb-buffer-pool-size=64M',
        `--log-error=${this.dir}/error.log`,
        ...this.options,
      ],
      { stdio: 'ignore' },
    );
    const deadline = Date.now() + 30_000;
    while (!(await accepting(this.port))) {
      if (Date.now() > deadline) throw new Error(`private MariaDB did not start: ${fs.readFileSync(`${this.dir}/error.log`, 'utf8').slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Stops the server (SIGTERM: a clean shutdown; SIGKILL: a crash) and waits for it to exit. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill(signal);
    await exited;
    this.child = null;
  }

  async destroy(): Promise<void> {
    await this.stop('SIGKILL');
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
