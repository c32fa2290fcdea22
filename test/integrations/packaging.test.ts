import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import express from 'express';
import request from 'supertest';

import { dashboardRoutes } from '../../src/http/routes/dashboard';

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
    const { exports, typesVersions } = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      exports: Record<string, unknown>;
      typesVersions: Record<string, Record<string, string[]>>;
    };
    for (const entry of ['./client', './bullmq', './amqp', './producer']) {
      const target = exports[entry] as { types: string; default: string };
      for (const file of [target.types, target.default]) expect([entry, fs.existsSync(path.join(out, file.replace(/^\.\/dist\//, '')))]).toEqual([entry, true]);
      // The same types for a resolution that reads no "exports" (node10).
      expect([entry, typesVersions['*']?.[entry.slice(2)]]).toEqual([entry, [target.types.slice(2)]]);
    }
  });

  /**
   * A project of a user's, in a folder of its own beside the build, with the package as `npm install`
   * lays it out: its package.json, and its `dist/` (the build). The build's own imports (zod, bullmq)
   * resolve from this repository's node_modules, as an installed package's would from the user's.
   */
  function userProject(source: string): string {
    const project = fs.mkdtempSync(path.join(ROOT, '.build-test-user-'));
    const installed = path.join(project, 'node_modules', 'rollcall');
    fs.mkdirSync(installed, { recursive: true });
    fs.copyFileSync(path.join(ROOT, 'package.json'), path.join(installed, 'package.json'));
    fs.symlinkSync(out, path.join(installed, 'dist'), 'dir');
    fs.writeFileSync(path.join(project, 'index.ts'), source);
    return project;
  }

  /** tsc's complaints about a user's project with these compiler options ('' when it type-checks). */
  function typeErrors(project: string, options: string[]): string {
    try {
      execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '--noEmit', '--strict', '--types', 'node', ...options, 'index.ts'], {
        cwd: project,
      });
      return '';
    } catch (error) {
      return String((error as { stdout?: Buffer }).stdout ?? error);
    }
  }

  it('when a TypeScript project imports rollcall/client, /producer, /bullmq or /amqp, then its types are found, whatever its module resolution', () => {
    // Typed, not `any`: a wrong call must be an error (an unused @ts-expect-error is one too).
    const project = userProject(`
      import { RollcallClient } from 'rollcall/client';
      import { openBatch } from 'rollcall/producer';
      import { rollcallProcessor } from 'rollcall/bullmq';
      import { rollcallConsumer } from 'rollcall/amqp';
      const client = new RollcallClient({ baseUrl: 'http://127.0.0.1:8080' });
      // @ts-expect-error count is a number
      void openBatch(client, { count: 'ten', enqueue: () => undefined });
      export const used = [rollcallProcessor, rollcallConsumer];
    `);
    try {
      // What `tsc --init` writes (module commonjs, so node10 resolution, which reads no "exports"), and the newer resolutions.
      const settings = [
        ['--module', 'commonjs', '--esModuleInterop', '--skipLibCheck'],
        ['--module', 'node16'],
        ['--module', 'esnext', '--moduleResolution', 'bundler'],
      ];
      for (const options of settings) expect([options.join(' '), typeErrors(project, options)]).toEqual([options.join(' '), '']);
    } finally {
      fs.rmSync(project, { recursive: true, force: true });
    }
  }, 120_000);

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

  /**
   * The package as `npm pack` makes it from a clone that was built (docs/integrations.md), unpacked:
   * the repository's tracked files, this build as its dist/, and the dashboard's script compiled.
   */
  function packed(): string {
    const clone = fs.mkdtempSync(path.join(ROOT, '.build-test-pack-'));
    const tracked = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT }).toString().split('\0').filter(Boolean);
    for (const file of tracked) {
      if (!fs.existsSync(path.join(ROOT, file))) continue; // deleted, not yet committed
      fs.mkdirSync(path.dirname(path.join(clone, file)), { recursive: true });
      fs.copyFileSync(path.join(ROOT, file), path.join(clone, file));
    }
    fs.cpSync(out, path.join(clone, 'dist'), { recursive: true });
    execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'dashboard/tsconfig.json'], { cwd: clone });
    const [{ filename }] = JSON.parse(execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--silent'], { cwd: clone }).toString()) as [
      { filename: string },
    ];
    execFileSync('tar', ['xzf', filename], { cwd: clone });
    return clone;
  }

  it('when the package is packed and installed, then every entry point, the CLI, the migrations and the dashboard are in it, and tests are not', async () => {
    const clone = packed();
    try {
      const pkg = path.join(clone, 'package');
      const manifest = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')) as {
        main: string;
        bin: Record<string, string>;
        exports: Record<string, string | Record<string, string>>;
      };
      const targets = [
        manifest.main,
        ...Object.values(manifest.bin),
        ...Object.values(manifest.exports).flatMap((t) => (typeof t === 'string' ? [t] : Object.values(t))),
      ];
      for (const target of [...targets, 'dist/migrations/index.js', 'dist/migrations/0001_create_batches.js'])
        expect([target, fs.existsSync(path.join(pkg, target))]).toEqual([target, true]);
      expect(fs.existsSync(path.join(pkg, 'test'))).toBe(false);
      const app = express().use(dashboardRoutes(path.join(pkg, 'dashboard')));
      for (const page of ['/', '/dashboard/style.css', '/dashboard/app.js']) expect([page, (await request(app).get(page)).status]).toEqual([page, 200]);
    } finally {
      fs.rmSync(clone, { recursive: true, force: true });
    }
  }, 120_000);
});
