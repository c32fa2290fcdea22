import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';

/** What the figures were measured on. */
export function describeMachine(databases: string): string {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const memGiB = (os.totalmem() / 2 ** 30).toFixed(0);
  let redis = 'unknown';
  try {
    redis =
      execFileSync('redis-server', ['--version'])
        .toString()
        .match(/v=(\S+)/)?.[1] ?? redis;
  } catch {
    /* Redis is only needed for the BullMQ peer */
  }
  return `${os.cpus().length} × ${cpu}, ${memGiB} GiB RAM, ${os.type()} ${os.release()}; Node ${process.version}; ${databases}; Redis ${redis}`;
}

/** Peak resident memory of a process so far (VmHWM), in MiB. */
export function peakRssMiB(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return kib / 1024;
}
