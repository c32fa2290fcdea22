import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

/** BullMQ is the peer we compare with, not a dependency of rollcall: it is installed here on first use. */
const PEERS = path.resolve(__dirname, '../.peers');
export const BULLMQ_VERSION = '5.81.5';

/** The part of BullMQ's API used here (it is not installed where the type checker looks). */
interface Bullmq {
  FlowProducer: new (opts: object) => { add(flow: object): Promise<unknown>; close(): Promise<void> };
  Worker: new (name: string, fn: () => Promise<unknown>, opts: object) => { on(event: 'completed', f: () => void): void; close(): Promise<void> };
  Queue: new (name: string, opts: object) => { obliterate(opts: object): Promise<void>; close(): Promise<void> };
}

function loadBullmq(): Bullmq {
  if (!fs.existsSync(path.join(PEERS, 'node_modules/bullmq/package.json'))) {
    fs.mkdirSync(PEERS, { recursive: true });
    fs.writeFileSync(path.join(PEERS, 'package.json'), '{"private":true}\n');
    execFileSync('npm', ['install', '--no-save', '--no-package-lock', '--no-audit', '--no-fund', `bullmq@${BULLMQ_VERSION}`], { cwd: PEERS, stdio: 'inherit' });
  }
  return createRequire(path.join(PEERS, 'package.json'))('bullmq') as Bullmq;
}

export interface BullmqResult {
  children: number;
  registeredPerSecond: number;
  completedPerSecond: number;
}

/**
 * One FlowProducer flow with `children` children and a no-op worker (concurrency 100) on Redis at
 * 127.0.0.1:6379, in this process, without HTTP: what BullMQ's own machinery costs per child.
 */
export async function runBullmq(children: number): Promise<BullmqResult> {
  const { FlowProducer, Worker, Queue } = loadBullmq();
  const connection = { host: '127.0.0.1', port: 6379 };
  const suffix = Date.now().toString(36);
  const childQueue = `rollcall-bench-children-${suffix}`;
  const parentQueue = `rollcall-bench-parent-${suffix}`;
  const flows = new FlowProducer({ connection });

  const addStarted = process.hrtime.bigint();
  await flows.add({
    name: 'parent',
    queueName: parentQueue,
    children: Array.from({ length: children }, (_, i) => ({ name: 'child', queueName: childQueue, data: { i } })),
  });
  const addSeconds = Number(process.hrtime.bigint() - addStarted) / 1e9;

  let completed = 0;
  const processStarted = process.hrtime.bigint();
  const allDone = new Promise<void>((resolve) => {
    const worker = new Worker(childQueue, async () => undefined, { connection, concurrency: 100 });
    worker.on('completed', () => {
      if (++completed === children) void worker.close().then(resolve);
    });
  });
  await allDone;
  const processSeconds = Number(process.hrtime.bigint() - processStarted) / 1e9;

  await flows.close();
  for (const name of [childQueue, parentQueue]) {
    const queue = new Queue(name, { connection });
    await queue.obliterate({ force: true });
    await queue.close();
  }
  return { children, registeredPerSecond: children / addSeconds, completedPerSecond: children / processSeconds };
}
