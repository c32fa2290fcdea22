import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

/** A real service process on a port it picked itself. */
export interface ServiceProcess {
  url: string;
  child: ChildProcess;
  /** Sends a signal and resolves when the process has exited. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

const ROOT = path.resolve(__dirname, '../..');

/** Tests run the TypeScript source through tsx; the benchmark runs the compiled build, as production does. */
export const FROM_SOURCE = ['--import', 'tsx', 'src/main.ts'];
/** `npm start`'s own command line after `node` (V8 flags included), so the benchmark measures what ships. */
export const FROM_BUILD: string[] = (() => {
  const start = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start.split(/\s+/);
  if (start[0] !== 'node') throw new Error(`package.json's start script should run node: ${start.join(' ')}`);
  return start.slice(1);
})();

export function spawnService(env: Record<string, string>, entry: string[] = FROM_SOURCE): Promise<ServiceProcess> {
  const child = spawn(process.execPath, entry, {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', LOG_LEVEL: 'warn', ROLLCALL_ANNOUNCE_PORT: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`service did not start in 30 s:\n${stderr}`)), 30_000);
    // Cleared on exit too: a service that refuses its configuration must not leave a timer holding Jest's worker for 30 s.
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`service exited with ${code} before listening:\n${stderr}`));
    });
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      const match = /^ROLLCALL_PORT=(\d+)$/.exec(line);
      if (!match) return;
      clearTimeout(timer);
      resolve({
        url: `http://127.0.0.1:${match[1]}`,
        child,
        async stop(signal = 'SIGTERM') {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          await exited;
        },
      });
    });
  });
}

/** POST or GET JSON; returns status and parsed body. */
export async function call(url: string, method: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** Runs `worker` on `clients` concurrent loops that pull tasks from one list until it is empty. */
export async function runClients<T>(tasks: T[], clients: number, worker: (task: T, client: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: clients }, async (_, client) => {
      while (next < tasks.length) {
        const task = tasks[next++] as T;
        await worker(task, client);
      }
    }),
  );
}
