import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import mysql from 'mysql2/promise';

import { freePorts } from './ports';

/**
 * A MariaDB Galera cluster of a test's own: `mariadbd` processes on private ports with their own
 * datadirs under one temp dir (rsync SST, ROW binlog, interleaved autoinc locks), and optionally
 * HAProxy in front of them (node 1 the writer, the others backups). Never touches the server the
 * other suites use.
 */
export const GALERA_PROVIDER = '/usr/lib/galera/libgalera_smm.so';
const MARIADBD = '/usr/sbin/mariadbd';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface NodePorts {
  sql: number;
  gcomm: number;
  ist: number;
  sst: number;
}

export class GaleraNode {
  child: ChildProcess | null = null;
  constructor(
    readonly index: number,
    readonly dir: string,
    readonly ports: NodePorts,
  ) {}

  get errorLog(): string {
    return path.join(this.dir, 'error.log');
  }

  /** The server URL (no database): root without password, grant tables skipped. */
  url(database = ''): string {
    return `mysql://root@127.0.0.1:${this.ports.sql}/${database}`;
  }

  get alive(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The error log's [ERROR] lines and its last lines: why a node did not start. */
  tail(): string {
    if (!fs.existsSync(this.errorLog)) return '(no error log)';
    const lines = fs.readFileSync(this.errorLog, 'utf8').split('\n');
    return [...lines.filter((l) => l.includes('[ERROR]')).slice(0, 20), '…', ...lines.slice(-15)].join('\n');
  }

  /** Kills the node (SIGKILL by default: a crash) and waits for it to exit. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const child = this.child;
    if (!child || !this.alive) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill(signal);
    await exited;
    this.child = null;
  }
}

/**
 * As root, the servers run as `mysql` (their datadirs chowned to it): the rsync daemon of an rsync
 * SST joiner started by root would drop to `nobody` and could not write the datadir.
 */
const serverUser = (): string => (process.getuid?.() === 0 ? 'mysql' : os.userInfo().username);

function nodeConfig(node: GaleraNode, all: GaleraNode[]): string {
  const peers = all.map((n) => `127.0.0.1:${n.ports.gcomm}`).join(',');
  return `[mysqld]
datadir=${node.dir}/data
port=${node.ports.sql}
bind-address=127.0.0.1
socket=${node.dir}/sock
pid-file=${node.dir}/pid
log-error=${node.errorLog}
user=${serverUser()}
skip-grant-tables
skip-name-resolve
innodb_buffer_pool_size=64M
innodb_log_file_size=16M
innodb_flush_log_at_trx_commit=2
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider=${GALERA_PROVIDER}
wsrep_cluster_name=rollcall_test
wsrep_cluster_address=gcomm://${peers}
wsrep_node_name=node${node.index}
wsrep_node_address=127.0.0.1:${node.ports.gcomm}
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:${node.ports.gcomm};ist.recv_addr=127.0.0.1:${node.ports.ist};gcache.size=64M"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:${node.ports.sst}
`;
}

async function wsrepStatus(url: string): Promise<Record<string, string>> {
  const conn = await mysql.createConnection({ uri: url, connectTimeout: 1000 });
  try {
    const [rows] = await conn.query("SHOW STATUS LIKE 'wsrep_%'");
    return Object.fromEntries((rows as Array<{ Variable_name: string; Value: string }>).map((r) => [r.Variable_name, r.Value]));
  } finally {
    await conn.end();
  }
}

export class GaleraCluster {
  readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-galera-'));
  nodes: GaleraNode[] = [];
  private haproxy: ChildProcess | null = null;
  haproxyPort = 0;

  static available(): boolean {
    return (
      fs.existsSync(MARIADBD) &&
      fs.existsSync(GALERA_PROVIDER) &&
      fs.existsSync('/usr/bin/rsync') &&
      fs.existsSync('/usr/bin/mariadb-install-db') &&
      fs.existsSync('/usr/bin/mariadb')
    );
  }

  /**
   * Starts `size` nodes: the first bootstraps the cluster, the others join it one by one (rsync SST).
   * Tries again from scratch once (new datadirs and ports): a port picked free (ports.ts) can still be
   * taken by another process of the machine before the node binds it.
   */
  async start(size = 3): Promise<void> {
    try {
      await this.startOnce(size);
    } catch (error) {
      console.warn(`Galera cluster did not start, trying once more: ${String(error).slice(0, 2000)}`);
      for (const node of this.nodes) await node.kill('SIGKILL');
      for (const node of this.nodes) fs.rmSync(node.dir, { recursive: true, force: true });
      this.nodes = [];
      await this.startOnce(size);
    }
  }

  private async startOnce(size: number): Promise<void> {
    const ports = await freePorts(4 * size);
    for (let i = 1; i <= size; i++) {
      const dir = path.join(this.dir, `node${i}`);
      fs.mkdirSync(path.join(dir, 'data'), { recursive: true });
      this.nodes.push(
        new GaleraNode(i, dir, { sql: ports.pop() as number, gcomm: ports.pop() as number, ist: ports.pop() as number, sst: ports.pop() as number }),
      );
    }
    for (const node of this.nodes) fs.writeFileSync(path.join(node.dir, 'my.cnf'), nodeConfig(node, this.nodes));
    if (process.getuid?.() === 0) {
      fs.chmodSync(this.dir, 0o755);
      execFileSync('chown', ['-R', 'mysql:mysql', ...this.nodes.map((n) => n.dir)]);
    }
    const first = this.nodes[0] as GaleraNode;
    execFileSync(
      'mariadb-install-db',
      [`--defaults-file=${first.dir}/my.cnf`, `--user=${serverUser()}`, '--skip-test-db', '--auth-root-authentication-method=normal'],
      { stdio: 'ignore' },
    );
    this.spawnNode(first, ['--wsrep-new-cluster']);
    await this.waitReady(first, 1);
    for (const node of this.nodes.slice(1)) {
      this.spawnNode(node, []);
      await this.waitReady(node, node.index);
    }
  }

  private spawnNode(node: GaleraNode, extra: string[]): void {
    node.child = spawn(MARIADBD, [`--defaults-file=${node.dir}/my.cnf`, ...extra], { stdio: 'ignore' });
  }

  /** Waits until the node says wsrep_ready=ON, Synced, in a primary component of at least `clusterSize`. */
  async waitReady(node: GaleraNode, clusterSize: number, timeoutMs = 90_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last = 'no answer';
    while (Date.now() < deadline) {
      if (!node.alive) {
        await sleep(300); // let it finish writing its error log
        throw new Error(`Galera node ${node.index} exited while starting:\n${node.tail()}`);
      }
      try {
        const status = await wsrepStatus(node.url());
        last = `ready=${status.wsrep_ready} state=${status.wsrep_local_state_comment} size=${status.wsrep_cluster_size} status=${status.wsrep_cluster_status}`;
        if (
          status.wsrep_ready === 'ON' &&
          status.wsrep_local_state_comment === 'Synced' &&
          status.wsrep_cluster_status === 'Primary' &&
          Number(status.wsrep_cluster_size) >= clusterSize
        )
          return;
      } catch (error) {
        last = String(error);
      }
      await sleep(200);
    }
    throw new Error(`Galera node ${node.index} not ready after ${timeoutMs} ms (${last}):\n${node.tail()}`);
  }

  /** HAProxy on a private port: node 1 is the writer, the others are backups, TCP checks every 200 ms. */
  async startHaproxy(): Promise<number> {
    [this.haproxyPort] = (await freePorts(1)) as [number];
    const [writer, ...backups] = this.nodes;
    const server = (n: GaleraNode, backup: boolean) =>
      `  server node${n.index} 127.0.0.1:${n.ports.sql} check inter 200 fall 1 rise 2 on-marked-down shutdown-sessions${backup ? ' backup' : ''}`;
    const cfg = `global
  maxconn 2000
defaults
  mode tcp
  timeout connect 1s
  timeout client 60s
  timeout server 60s
listen galera
  bind 127.0.0.1:${this.haproxyPort}
${server(writer as GaleraNode, false)}
${backups.map((n) => server(n, true)).join('\n')}
`;
    const file = path.join(this.dir, 'haproxy.cfg');
    fs.writeFileSync(file, cfg);
    this.haproxy = spawn('haproxy', ['-db', '-f', file], { stdio: 'ignore' });
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      try {
        await wsrepStatus(`mysql://root@127.0.0.1:${this.haproxyPort}/`);
        return this.haproxyPort;
      } catch {
        await sleep(100);
      }
    }
    throw new Error('HAProxy did not start');
  }

  /** Creates a database (replicated to every node: DDL runs in total order) and returns its name. */
  async createDatabase(name: string): Promise<void> {
    const conn = await mysql.createConnection({ uri: (this.nodes[0] as GaleraNode).url() });
    try {
      await conn.query(`CREATE DATABASE \`${name}\``);
    } finally {
      await conn.end();
    }
  }

  async stop(): Promise<void> {
    if (this.haproxy && this.haproxy.exitCode === null) {
      const exited = new Promise((resolve) => this.haproxy?.once('exit', resolve));
      this.haproxy.kill('SIGKILL');
      await exited;
    }
    for (const node of this.nodes) await node.kill('SIGKILL');
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
