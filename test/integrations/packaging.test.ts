import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '../..');

/**
 * The package as users get it: built with the build's tsconfig, loaded by plain node. bullmq and
 * amqplib are optional peers, so the modules that do not need them must not load them.
 */
describe('the built package and its optional peers', () => {
  // Inside the repository, so that the built modules find node_modules as installed code would.
  const out = fs.mkdtempSync(path.join(ROOT, '.build-test-'));
  beforeAll(() => {
    execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', out], { cwd: ROOT });
  }, 120_000);
  afterAll(() => fs.rmSync(out, { recursive: true, force: true }));

  /** The packages a built module loads, by name, from a fresh node process. */
  function packagesLoadedBy(file: string): string[] {
    const script = `
      const Module = require('node:module');
      const seen = new Set();
      const load = Module._load;
      Module._load = function (request, ...rest) {
        if (!request.startsWith('.') && !request.startsWith('node:') && !require('node:path').isAbsolute(request)) seen.add(request.split('/')[0]);
        return load.call(this, request, ...rest);
      };
      require(${JSON.stringify(file)});
      process.stdout.write(JSON.stringify([...seen].sort()));`;
    return JSON.parse(execFileSync(process.execPath, ['-e', script], { cwd: ROOT }).toString()) as string[];
  }

  it('when rollcall/client, /producer or /amqp is loaded, then neither bullmq nor amqplib is', () => {
    const client = packagesLoadedBy(path.join(out, 'src/client/index.js'));
    expect(client).toEqual([]);
    for (const entry of ['producer', 'amqp']) {
      const loaded = packagesLoadedBy(path.join(out, `src/integrations/${entry}.js`));
      expect([entry, loaded.filter((name) => ['bullmq', 'amqplib', 'ioredis'].includes(name))]).toEqual([entry, []]);
    }
    expect(packagesLoadedBy(path.join(out, 'src/integrations/bullmq.js'))).toContain('bullmq');
  });

  it('when a user imports rollcall/bullmq, /amqp, /producer or /client, then built code and types exist', () => {
    const exports = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, unknown> }).exports;
    for (const entry of ['./client', './bullmq', './amqp', './producer']) {
      const target = exports[entry] as { types: string; default: string };
      for (const file of [target.types, target.default]) expect([entry, fs.existsSync(path.join(out, file.replace(/^\.\/dist\//, '')))]).toEqual([entry, true]);
    }
  });

  it('when a user catches what an integration throws or reports, then its error class comes from the entry point they imported', () => {
    const classOf = (entry: string) =>
      execFileSync(
        process.execPath,
        ['-e', `process.stdout.write(typeof require(${JSON.stringify(path.join(out, `src/integrations/${entry}.js`))}).RollcallIntegrationError)`],
        {
          cwd: ROOT,
        },
      ).toString();
    for (const entry of ['producer', 'amqp', 'bullmq']) expect([entry, classOf(entry)]).toEqual([entry, 'function']);
  });
});
