import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

/** A process whose CPU a timed round accounts for, or every process of one server (PostgreSQL's). */
export interface Accounted {
  name: string;
  pids(): number[];
}

/** CPU time of each accounted process over a timed round, and the round's wall time. */
export interface CpuUse {
  /** Seconds of CPU (user and system, all threads) by accounted name; a name none of whose processes could be read is absent. */
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

/** CPU seconds used so far by each thread of a process, by thread id (or the whole process as one, where only /proc/<pid>/stat is read). */
type ThreadSeconds = Map<string, number>;

/**
 * CPU seconds each thread of a process has used so far (Linux's /proc); undefined once it has
 * exited, or where there is no /proc. Each thread's scheduler time in ns where the kernel keeps it:
 * /proc/<pid>/stat counts in clock ticks (10 ms), half a µs a job in a round of 20,000 jobs that
 * lasts a second. By thread, because a server's threads come and go (MariaDB's, one a connection):
 * a sum over the live ones fell when one that had run for minutes exited during a round, and the
 * round's MariaDB CPU came out negative.
 */
function cpuSecondsOf(pid: number): ThreadSeconds | undefined {
  try {
    const threads: ThreadSeconds = new Map();
    for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
      try {
        threads.set(task, Number(fs.readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]) / 1e9);
      } catch {
        // The thread exited after the directory was read: it used nothing more that this round will see.
      }
    }
    return threads;
  } catch {
    const seconds = statSecondsOf(pid);
    return seconds === undefined ? undefined : new Map([['process', seconds]]);
  }
}

/**
 * What a process's threads used between two readings: those that ran the whole time, from the
 * first reading; those that started meanwhile, from 0. A thread that exited meanwhile loses its share.
 */
function usedBetween(was: ThreadSeconds, now: ThreadSeconds): number {
  let used = 0;
  for (const [thread, seconds] of now) used += seconds - (was.get(thread) ?? 0);
  return used;
}

/** The same from /proc/<pid>/stat, in clock ticks; it also counts threads that have exited. */
function statSecondsOf(pid: number): number | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after "pid (comm) " (comm may hold ") "): utime and stime are the 12th and 13th.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

/**
 * A meter for one round: this process (the worker) through `process.cpuUsage`, the others through
 * /proc. Their pids are looked up before the round's clock starts and again after it stops (each
 * lookup forks pgrep), so start and stop themselves only read files; a process that starts during
 * the round (a new PostgreSQL backend) counts from 0, one that exits during it loses its share.
 */
export function cpuMeter(accounted: Accounted[]): CpuMeter {
  const pidsBefore = accounted.map((a) => a.pids());
  const read = (pids: number[]) => new Map(pids.map((pid) => [pid, cpuSecondsOf(pid)]));
  let before: Array<Map<number, ThreadSeconds | undefined>> = [];
  let workerBefore = process.cpuUsage();
  let startedAt = 0;
  return {
    start() {
      before = pidsBefore.map(read);
      workerBefore = process.cpuUsage();
      startedAt = performance.now();
    },
    stop() {
      const worker = process.cpuUsage(workerBefore);
      const wallSeconds = (performance.now() - startedAt) / 1000;
      const seconds: Record<string, number> = { worker: (worker.user + worker.system) / 1e6 };
      const known = before.map((was) => [...was.keys()]).map(read);
      accounted.forEach(({ name, pids }, i) => {
        const was = before[i]!;
        const used = [...known[i]!]
          .filter(([pid, now]) => now !== undefined && was.get(pid) !== undefined)
          .map(([pid, now]) => usedBetween(was.get(pid)!, now!));
        const started = read(pids().filter((pid) => !was.has(pid))); // since the clock started: from 0
        for (const now of started.values()) if (now !== undefined) used.push(usedBetween(new Map(), now));
        // None readable: not on this machine (a remote database) or no /proc. Left out, not counted as 0.
        if (used.length > 0) seconds[name] = used.reduce((a, b) => a + b, 0);
      });
      return { seconds, wallSeconds };
    },
  };
}
