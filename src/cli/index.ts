#!/usr/bin/env node
import readline from 'node:readline';
import { parseArgs } from 'node:util';

import { RollcallApiError, RollcallClient } from '../client';
import { toError } from '../domain/errors';

const USAGE = `usage: rollcall <command> [options]

  serve                                   start the service (the settings npm start reads; npm start
                                          also gives Node --max-semi-space-size=8: set it in NODE_OPTIONS)
  migrate                                 apply database migrations and exit
  open [--user-key K] [--callback-url U] [--metadata JSON] [--parent-item ITEM]
  add <batchId> <count> [--idempotency-key K]
  seal <batchId> [--expected-items N]
  ack [<itemId> …] [--failed [--error TEXT]]  IDs as arguments, or one per line on standard input
  cancel <batchId>
  status <batchId>
  item <itemId>
  failures <batchId> [--limit N] [--cursor C]
  wait <batchId> [--timeout SECONDS]
  list [--state S] [--user-key K] [--parent BATCH] [--limit N]

The service is ROLLCALL_URL (default http://127.0.0.1:8080); ROLLCALL_TOKEN is sent as a bearer token.
Answers are printed as JSON. Exit code 1 on an error answer, 2 on bad usage.`;

class UsageError extends Error {}

function client(): RollcallClient {
  return new RollcallClient({ baseUrl: process.env.ROLLCALL_URL ?? 'http://127.0.0.1:8080', token: process.env.ROLLCALL_TOKEN });
}

async function* stdinLines(): AsyncGenerator<string> {
  for await (const line of readline.createInterface({ input: process.stdin })) if (line.trim()) yield line.trim();
}

function need(value: string | undefined, what: string): string {
  if (!value) throw new UsageError(`missing ${what}`);
  return value;
}

function integer(value: string | undefined, what: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n)) throw new UsageError(`${what} must be an integer`);
  return n;
}

async function run(argv: string[]): Promise<unknown> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      'user-key': { type: 'string' },
      'callback-url': { type: 'string' },
      metadata: { type: 'string' },
      'idempotency-key': { type: 'string' },
      'expected-items': { type: 'string' },
      failed: { type: 'boolean' },
      error: { type: 'string' },
      'parent-item': { type: 'string' },
      parent: { type: 'string' },
      cursor: { type: 'string' },
      timeout: { type: 'string' },
      state: { type: 'string' },
      limit: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command, ...args] = positionals;
  if (values.help || !command) throw new UsageError('');
  switch (command) {
    case 'serve': {
      const { serve, exitOnStartFailure } = await import('../main');
      await serve().catch(exitOnStartFailure);
      return undefined;
    }
    case 'migrate':
      await import('./migrate');
      return undefined;
    case 'open':
      return client().open({
        userKey: values['user-key'],
        callbackUrl: values['callback-url'],
        metadata: values.metadata ? (JSON.parse(values.metadata) as Record<string, unknown>) : undefined,
        parentItem: values['parent-item'],
      });
    case 'add': {
      const added = await client().addItems(need(args[0], 'batchId'), integer(need(args[1], 'count'), 'count') as number, {
        idempotencyKey: values['idempotency-key'],
      });
      return { batchId: added.batchId, total: added.total, groups: added.groups };
    }
    case 'seal':
      return client().seal(need(args[0], 'batchId'), { expectedItems: integer(values['expected-items'], '--expected-items') });
    case 'ack': {
      const ids: string[] = args.length > 0 ? args : [];
      if (ids.length === 0) for await (const line of stdinLines()) ids.push(line);
      if (values.error !== undefined && !values.failed) throw new UsageError('--error goes with --failed');
      return client().ack(ids, { outcome: values.failed ? 'failed' : 'succeeded', error: values.error });
    }
    case 'cancel':
      return client().cancel(need(args[0], 'batchId'));
    case 'item':
      return client().item(need(args[0], 'itemId'));
    case 'failures':
      return client().failures(need(args[0], 'batchId'), { limit: integer(values.limit, '--limit'), cursor: values.cursor });
    case 'status':
      return client().status(need(args[0], 'batchId'));
    case 'wait':
      return client().waitForCompletion(need(args[0], 'batchId'), { timeoutMs: (Number(values.timeout ?? 60) || 0) * 1000 });
    case 'list':
      return client().list({
        state: values.state as 'open' | undefined,
        userKey: values['user-key'],
        parent: values.parent,
        limit: integer(values.limit, '--limit'),
      });
    default:
      throw new UsageError(`unknown command ${command}`);
  }
}

run(process.argv.slice(2)).then(
  (answer) => {
    if (answer !== undefined) process.stdout.write(`${JSON.stringify(answer, null, 2)}\n`);
  },
  (caught: unknown) => {
    const error = toError(caught);
    if (error instanceof UsageError) {
      process.stderr.write(`${error.message ? `${error.message}\n\n` : ''}${USAGE}\n`);
      process.exit(2);
    }
    if (error instanceof RollcallApiError) process.stderr.write(`${JSON.stringify({ status: error.status, code: error.code, message: error.message })}\n`);
    else process.stderr.write(`${error.message}\n`);
    process.exit(1);
  },
);
