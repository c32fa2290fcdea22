import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import amqp from 'amqplib';
import { Queue } from 'bullmq';

import { amqpUrl, describeWith, redisConnection, redisUrl } from '../helpers/brokers';
import { ServiceProcess, spawnService } from '../helpers/processes';

const ROOT = path.resolve(__dirname, '../..');
/** The queue both examples use, by its name in their code. */
const QUEUE = 'thumbnails';

/** An example as examples/README.md runs it, its output gathered. */
interface Running {
  child: ChildProcess;
  output(): string;
  /** Resolves once the output matches `pattern` (with the match), rejects if the process exits first. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  exited: Promise<number | null>;
}

function runExample(file: string, env: Record<string, string>): Running {
  const child = spawn(process.execPath, [require.resolve('tsx/cli'), '--tsconfig', 'examples/tsconfig.json', file], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const listeners = new Set<() => void>();
  const gather = (chunk: Buffer) => {
    output += chunk.toString();
    for (const listener of listeners) listener();
  };
  child.stdout!.on('data', gather);
  child.stderr!.on('data', gather);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    output: () => output,
    exited,
    waitFor(pattern, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const match = pattern.exec(output);
          if (!match) return;
          done();
          resolve(match);
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`${file} did not print ${pattern} in ${timeoutMs} ms; it printed:\n${output}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        listeners.add(check);
        void exited.then((code) => {
          if (!listeners.has(check)) return;
          done();
          reject(new Error(`${file} exited with ${code} before printing ${pattern}; it printed:\n${output}`));
        });
        check();
      });
    },
  };
}

/** A worker stopped as its README says (Ctrl-C): it must finish what it holds and exit with 0. */
async function stopWithCtrlC(worker: Running): Promise<number | null> {
  worker.child.kill('SIGINT');
  return worker.exited;
}

/**
 * The examples a newcomer runs first (examples/README.md): the producer opens a batch of 1,000
 * items and queues them, the worker processes them through rollcall/bullmq or rollcall/amqp, where
 * every 100th item fails for good and every 7th fails once. What the newcomer should see: the
 * worker prints the batch complete, 990 succeeded and 10 failed.
 */
describe('the runnable examples', () => {
  let service: ServiceProcess;
  let dir: string;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-examples-'));
    service = await spawnService({ SQLITE_PATH: path.join(dir, 'examples.sqlite') });
  });
  afterAll(async () => {
    await service?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  describeWith(redisUrl)('BullMQ', () => {
    const connection = () => redisConnection(redisUrl as string);
    const emptyQueue = async () => {
      const queue = new Queue(QUEUE, { connection: connection() });
      await queue.obliterate({ force: true });
      await queue.close();
    };
    beforeAll(emptyQueue);
    afterAll(emptyQueue);

    it('when the producer and the worker run as the README says, then the worker prints the batch complete (990 succeeded, 10 failed) and Ctrl-C stops it with exit code 0', async () => {
      const { host, port } = connection();
      const env = { ROLLCALL_URL: service.url, REDIS_HOST: host, REDIS_PORT: String(port) };
      const worker = runExample('examples/bullmq/worker.ts', env);
      try {
        await worker.waitFor(/worker running/);
        const producer = runExample('examples/bullmq/producer.ts', env);
        const [, batchId] = await producer.waitFor(/batch (\S+): 1000 jobs queued, sealed/);
        expect(await producer.exited).toBe(0);
        await worker.waitFor(new RegExp(`batch ${batchId} is complete: 990 succeeded, 10 failed; first failures:[^]*the input is broken`));
        expect(worker.output()).not.toMatch(/cannot watch|Error/);
      } finally {
        expect(await stopWithCtrlC(worker)).toBe(0);
      }
    });
  });

  describeWith(amqpUrl)('RabbitMQ', () => {
    const deleteQueue = async () => {
      const connection = await amqp.connect(amqpUrl as string);
      try {
        const channel = await connection.createChannel();
        await channel.deleteQueue(QUEUE);
      } finally {
        await connection.close();
      }
    };
    beforeAll(deleteQueue);
    afterAll(deleteQueue);

    it('when the producer and the consumer run as the README says, then the consumer prints the batch complete (990 succeeded, 10 failed) and Ctrl-C stops it with exit code 0', async () => {
      const env = { ROLLCALL_URL: service.url, AMQP_URL: amqpUrl as string };
      const worker = runExample('examples/rabbitmq/worker.ts', env);
      try {
        await worker.waitFor(/consumer running/);
        const producer = runExample('examples/rabbitmq/producer.ts', env);
        const [, batchId] = await producer.waitFor(/batch (\S+): 1000 messages published, sealed/);
        expect(await producer.exited).toBe(0);
        await worker.waitFor(new RegExp(`batch ${batchId} is complete: 990 succeeded, 10 failed`));
        expect(worker.output()).not.toMatch(/cannot watch|Error/);
      } finally {
        expect(await stopWithCtrlC(worker)).toBe(0);
      }
    });
  });
});
