import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

/** A process whose CPU a timed round accounts for, or every process of one server (PostgreSQL's). */
export interface Accounted {
  name: string;
  pids(): number[];
}

/** CPU time of each accounted process over a timed round, and the round's wall time. */
export interface CpuUse {
  /** Seconds of CPU (user and system, all threads) by accounted name. */
  seconds: Record<string, number>;
  wallSeconds: number;
}

/** Starts when a round's clock starts; `stop` reads what each process used since. */
export interface CpuMeter {
  start(): void;
  stop(): CpuUse;
}

const CLOCK_TICKS_PER_SECOND = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** The processes whose command matches `comm` (a `pgrep -x` pattern, such as `mariadbd|mysqld`); none when none run. */
export function processesNamed(name: string, comm: string): Accounted {
  return {
    name,
    pids() {
      try {
        return execFileSync('pgrep', ['-x', comm]).toString().trim().split('\n').map(Number);
      } catch {
        return []; // pgrep exits with 1 when nothing matches
      }
    },
  };
}

/** CPU seconds a process has used so far, from /proc (Linux); undefined once it has exited. */
function cpuSecondsOf(pid: number): number | undefined {
  try {
    // Fields after "pid (comm) ": utime and stime are the 12th and 13th, in clock ticks.
    const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

/**
 * A meter for one round: this process (the worker) through `process.cpuUsage`, the others through
 * /proc. Their pids are looked up now, before the round's clock starts (each lookup forks pgrep), so
 * start and stop only read files. A process that exits during the round loses its share.
 */
export function cpuMeter(accounted: Accounted[]): CpuMeter {
  const pids = accounted.map((a) => ({ name: a.name, pids: a.pids() }));
  const read = () => pids.map(({ pids: list }) => new Map(list.map((pid) => [pid, cpuSecondsOf(pid)])));
  let before: Array<Map<number, number | undefined>> = [];
  let workerBefore = process.cpuUsage();
  let startedAt = 0;
  return {
    start() {
      before = read();
      workerBefore = process.cpuUsage();
      startedAt = performance.now();
    },
    stop() {
      const worker = process.cpuUsage(workerBefore);
      const wallSeconds = (performance.now() - startedAt) / 1000;
      const after = read();
      const seconds: Record<string, number> = { worker: (worker.user + worker.system) / 1e6 };
      pids.forEach(({ name, pids: list }, i) => {
        if (list.length === 0) return; // not on this machine (a remote database): nothing to account
        let used = 0;
        for (const [pid, now] of after[i]!) if (now !== undefined) used += now - (before[i]!.get(pid) ?? 0);
        seconds[name] = used;
      });
      return { seconds, wallSeconds };
    },
  };
}
