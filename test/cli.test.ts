import { execFile } from 'node:child_process';
import path from 'node:path';

import { backends } from './helpers/backends';
import { startService, TestService } from './helpers/service';

/** What the CLI does with its arguments is the same on every backend: SQLite serves it. */
const [[, sqlite]] = backends() as [[string, Parameters<typeof startService>[0]]];

describe('the CLI refuses bad usage with exit 2 and a message naming the option', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(sqlite);
  });
  afterAll(async () => {
    await svc.stop();
  });

  const run = (args: string[], input?: string) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        ['--import', 'tsx', 'src/cli/index.ts', ...args],
        { cwd: path.resolve(__dirname, '..'), env: { ...process.env, ROLLCALL_URL: svc.url } },
        (error, stdout, stderr) => resolve({ code: error ? Number(error.code) : 0, stdout, stderr }),
      );
      child.stdin?.end(input ?? '');
    });

  /** A usage error: exit 2, one line that names `option`, then the usage text; nothing sent. */
  const expectUsageError = (answer: { code: number; stdout: string; stderr: string }, option: RegExp) => {
    expect(answer).toMatchObject({ code: 2, stdout: '' });
    const [first, blank, usage] = answer.stderr.split('\n');
    expect(first).toMatch(option);
    expect(blank).toBe('');
    expect(usage).toMatch(/^usage: rollcall/);
  };

  const openBatch = async () => JSON.parse((await run(['open'])).stdout).id as string;

  it.each([[['--help']], [['-h']], [['status', '--help']]])('when help is asked for (%j), then it is printed to stdout with exit 0', async (args) => {
    expect(await run(args)).toMatchObject({ code: 0, stderr: '', stdout: expect.stringMatching(/^usage: rollcall/) });
  });

  it('when no command is given, then the usage goes to stderr with exit 2', async () => {
    expect(await run([])).toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^usage: rollcall/) });
  });

  it.each([
    [['status', 'b', '--bogus'], /^Unknown option '--bogus'$/],
    [['list', '-x'], /^Unknown option '-x'$/],
    [['seal', 'b', '--expected-items'], /^Option '--expected-items <value>' argument missing$/],
  ])('when the options are %j, then it is a one-line usage error naming the option', async (args, message) => {
    expectUsageError(await run(args), message);
  });

  it.each([['{bad'], [''], ['null'], ['[1]'], ['"text"'], ['5']])(
    "when --metadata is '%s', then it is a usage error saying it must be a JSON object (not a batch without metadata)",
    async (metadata) => {
      expectUsageError(await run(['open', '--metadata', metadata]), /^--metadata must be a JSON object/);
    },
  );

  it.each([[['migrate', 'down']], [['serve', 'now']]])("when '%s' is run, then it is a usage error, not a migration or a start", async (argv) => {
    expectUsageError(await run(argv), /takes no arguments/);
  });

  it.each([
    [['cancel', 'a', 'b'], /^cancel takes 1 argument, not 'a b'$/],
    [['add', 'a', '5', '6'], /^add takes 2 arguments, not 'a 5 6'$/],
    [['list', 'sealed'], /^list takes no arguments, not 'sealed'$/],
    [['seal', 'a', '--limit', '5'], /^--limit does not go with seal$/],
    [['status', 'a', '--failed'], /^--failed does not go with status$/],
  ])('when %j is run, then it is a usage error naming what the command does not take (not a call that drops it)', async (argv, message) => {
    expectUsageError(await run(argv), message);
  });

  it('when --metadata is a JSON object, then the batch is opened with it', async () => {
    const opened = await run(['open', '--metadata', '{"tag":"cli"}']);
    expect(opened.code).toBe(0);
    expect(JSON.parse(opened.stdout)).toMatchObject({ metadata: { tag: 'cli' } });
  });

  it.each([['abc'], [''], ['-1'], ['1e1'], ['0x10'], ['Infinity']])(
    "when wait's --timeout is '%s', then it is a usage error naming --timeout (not a wait of 0 s)",
    async (timeout) => {
      const id = await openBatch();
      expectUsageError(await run(['wait', id, `--timeout=${timeout}`]), /^--timeout must be a number of seconds/);
    },
  );

  it.each([['0'], ['0.2'], ['60'], ['300']])("when wait's --timeout is '%s', then it waits and answers the batch", async (timeout) => {
    const id = await openBatch();
    expect((await run(['seal', id])).code).toBe(0); // no items: complete at once, so 60 s is not waited
    const waited = await run(['wait', id, '--timeout', timeout]);
    expect(waited.code).toBe(0);
    expect(JSON.parse(waited.stdout)).toMatchObject({ id, state: 'complete' });
  });

  it('when wait ends with the batch unfinished or cancelled, then it prints the batch and exits 3 or 4 (so `wait && publish` does not publish)', async () => {
    const id = await openBatch();
    const waited = await run(['wait', id, '--timeout', '0.2']);
    expect(waited.code).toBe(3);
    expect(JSON.parse(waited.stdout)).toMatchObject({ id, state: 'open' });
    expect((await run(['cancel', id])).code).toBe(0);
    const cancelled = await run(['wait', id, '--timeout', '0.2']);
    expect(cancelled.code).toBe(4);
    expect(JSON.parse(cancelled.stdout)).toMatchObject({ id, state: 'cancelled' });
  });

  it.each([
    [(id: string) => ['add', id, '0x2'], /^count must be a whole number/],
    [(id: string) => ['add', id, '1e1'], /^count must be a whole number/],
    [(id: string) => ['seal', id, '--expected-items', '0x0'], /^--expected-items must be a whole number/],
    [(id: string) => ['seal', id, '--expected-items', ''], /^--expected-items must be a whole number/],
    [(id: string) => ['failures', id, '--limit', '1e1'], /^--limit must be a whole number/],
    [() => ['list', '--limit', '0x10'], /^--limit must be a whole number/],
    [() => ['list', '--limit', ' 5'], /^--limit must be a whole number/],
  ])('when a number option is written as Number() reads it but a person does not (case %#), then it is a usage error naming it', async (args, message) => {
    expectUsageError(await run(args(await openBatch())), message);
  });

  it('when --state is not a batch state, then it is a usage error naming --state and the states', async () => {
    expectUsageError(await run(['list', '--state', 'done']), /^--state must be one of open, sealed, complete, cancelled/);
  });

  it('when --idempotency-key is empty, then it is a usage error (not an add without a key, which a retry repeats)', async () => {
    const id = await openBatch();
    expectUsageError(await run(['add', id, '2', '--idempotency-key', '']), /^--idempotency-key must not be empty/);
    expect(JSON.parse((await run(['status', id])).stdout)).toMatchObject({ total: 0 });
  });

  it('when the number options are written plainly, then they are sent', async () => {
    const id = await openBatch();
    expect(JSON.parse((await run(['add', id, '3', '--idempotency-key', 'k'])).stdout)).toMatchObject({ total: 3 });
    expect(JSON.parse((await run(['seal', id, '--expected-items', '3'])).stdout)).toMatchObject({ state: 'sealed' });
    expect(JSON.parse((await run(['failures', id, '--limit', '1'])).stdout)).toMatchObject({ failures: [] });
    const listed = JSON.parse((await run(['list', '--state', 'sealed', '--limit', '1'])).stdout);
    expect(listed.batches).toEqual([expect.objectContaining({ id })]);
  });
});
