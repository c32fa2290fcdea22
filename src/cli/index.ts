#!/usr/bin/env node
import readline from 'node:readline';
import { parseArgs } from 'node:util';

import { RollcallApiError, RollcallClient } from '../client';
import { BATCH_STATES, type BatchState } from '../contract/vocabulary';
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
  wait <batchId> [--timeout SECONDS]      SECONDS ≥ 0, fractions allowed (default 60; longer waits chain requests;
                                          a refused connection or a 5xx is asked again, 29–44 s, within SECONDS)
  list [--state S] [--user-key K] [--parent BATCH] [--limit N]

The service is ROLLCALL_URL (default http://127.0.0.1:8080); ROLLCALL_TOKEN is sent as a bearer token.
Answers are printed as JSON. Exit code 1 on an error answer, 2 on bad usage; wait prints the batch
and exits 0 only when it is complete: 3 when its time ran out first, 4 when it was cancelled.`;

/** `wait`'s exit codes when its time ran out first, and when the batch was cancelled: only complete is 0. */
const UNFINISHED = 3;
const CANCELLED = 4;

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

/**
 * Digits only: Number() also reads '' and ' ' as 0, '0x10' as 16 and '1e3' as 1000, which went out
 * as a count or limit nobody typed. Ranges are left to the service, which names them in its answer.
 */
function integer(value: string | undefined, what: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n)) throw new UsageError(`${what} must be a whole number (digits only), not '${value}'`);
  return n;
}

/** How long `wait` waits unless told: one wait request's longest (the API's 60 s). */
const DEFAULT_WAIT_SECONDS = 60;

/**
 * Seconds as digits with an optional fraction, checked here: the client does not send it as typed,
 * so a bad value was not refused but waited 0 s. No upper bound: the client chains wait requests of
 * up to 60 s each until the time is up.
 */
function waitSeconds(value: string | undefined): number {
  if (value === undefined) return DEFAULT_WAIT_SECONDS;
  if (!/^\d+(\.\d+)?$/.test(value)) throw new UsageError(`--timeout must be a number of seconds (digits, an optional fraction), not '${value}'`);
  return Number(value);
}

/** JSON that parses to null, an array or a string was sent as metadata (null: silently none at all). */
function jsonObject(value: string | undefined, what: string): Record<string, unknown> | undefined {
  if (value === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch (error) {
    throw new UsageError(`${what} must be a JSON object (${toError(error).message})`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new UsageError(`${what} must be a JSON object, not '${value}'`);
  return parsed as Record<string, unknown>;
}

/** The client drops an empty key: the add went out without one, and a retry added the items twice. */
function nonEmpty(value: string | undefined, what: string): string | undefined {
  if (value === '') throw new UsageError(`${what} must not be empty`);
  return value;
}

/** A state the service does not know was cast through and came back as the service's 400 (exit 1). */
function batchState(value: string | undefined): BatchState | undefined {
  if (value === undefined) return undefined;
  if (!(BATCH_STATES as readonly string[]).includes(value)) throw new UsageError(`--state must be one of ${BATCH_STATES.join(', ')}, not '${value}'`);
  return value as BatchState;
}

/** Node's own message carries a hint about '--' on further lines: the first sentence names the option. */
function parseArgsError(error: Error): UsageError {
  const firstSentence = error.message.split(/\.(?:\s|$)|\n/)[0] ?? error.message;
  return new UsageError(firstSentence);
}

function parse(argv: string[]) {
  try {
    return parseArgs({
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
  } catch (caught) {
    // An unknown option or a missing value is bad usage (exit 2), not an error answer (exit 1).
    const error = toError(caught);
    if ((error as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS_')) throw parseArgsError(error);
    throw error;
  }
}

/** What each command takes: how many words after its name (`any`: ack's IDs), and which options. */
const COMMANDS: Record<string, { words: number | 'any'; options: string[] }> = {
  serve: { words: 0, options: [] },
  migrate: { words: 0, options: [] },
  open: { words: 0, options: ['user-key', 'callback-url', 'metadata', 'parent-item'] },
  add: { words: 2, options: ['idempotency-key'] },
  seal: { words: 1, options: ['expected-items'] },
  ack: { words: 'any', options: ['failed', 'error'] },
  cancel: { words: 1, options: [] },
  status: { words: 1, options: [] },
  item: { words: 1, options: [] },
  failures: { words: 1, options: ['limit', 'cursor'] },
  wait: { words: 1, options: ['timeout'] },
  list: { words: 0, options: ['state', 'user-key', 'parent', 'limit'] },
};

/**
 * Words and options a command does not take are refused, not ignored: `migrate down` applied
 * migrations, `cancel A B` cancelled A alone, and `seal B --limit 5` sealed without a word.
 */
function checkFits(command: string, args: string[], values: Record<string, unknown>): void {
  const spec = COMMANDS[command];
  if (!spec) throw new UsageError(`unknown command ${command}`);
  if (spec.words !== 'any' && args.length > spec.words) {
    const takes = spec.words === 0 ? 'no arguments' : `${spec.words} argument${spec.words === 1 ? '' : 's'}`;
    throw new UsageError(`${command} takes ${takes}, not '${args.join(' ')}'`);
  }
  const foreign = Object.keys(values).find((option) => option !== 'help' && !spec.options.includes(option));
  if (foreign) throw new UsageError(`--${foreign} does not go with ${command}`);
}

async function run(argv: string[]): Promise<unknown> {
  const { values, positionals } = parse(argv);
  const [command, ...args] = positionals;
  // Help asked for is an answer (stdout, exit 0); no command at all is bad usage.
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return undefined;
  }
  if (!command) throw new UsageError('');
  checkFits(command, args, values);
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
        metadata: jsonObject(values.metadata, '--metadata'),
        parentItem: values['parent-item'],
      });
    case 'add': {
      const added = await client().addItems(need(args[0], 'batchId'), integer(need(args[1], 'count'), 'count') as number, {
        idempotencyKey: nonEmpty(values['idempotency-key'], '--idempotency-key'),
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
    case 'wait': {
      const batch = await client().waitForCompletion(need(args[0], 'batchId'), { timeoutMs: waitSeconds(values.timeout) * 1000 });
      // Its time ran out: a script's `rollcall wait … && next` must not go on.
      if (batch.state !== 'complete') process.exitCode = batch.state === 'cancelled' ? CANCELLED : UNFINISHED;
      return batch;
    }
    case 'list':
      return client().list({
        state: batchState(values.state),
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
