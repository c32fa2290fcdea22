import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import express from 'express';
import request from 'supertest';

import { dashboardRoutes } from '../../src/http/routes/dashboard';

describe("the dashboard's files", () => {
  let home: string;
  beforeAll(() => {
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-dashboard-'));
  });
  afterAll(() => fs.rmSync(home, { recursive: true, force: true }));

  /** A dashboard folder under `installedAt`, its three files each holding its own name. */
  function dashboardUnder(installedAt: string): string {
    const dir = path.join(home, installedAt, 'dashboard');
    for (const file of ['index.html', 'style.css', 'build/dashboard/app.js']) {
      fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
      fs.writeFileSync(path.join(dir, file), `the dashboard's ${file}`);
    }
    return dir;
  }

  it.each([
    ['pnpm', 'node_modules/.pnpm/rollcall@1.0.0/node_modules/rollcall'],
    ['npx', '.npm/_npx/0123abcd/node_modules/rollcall'],
    ['a plain folder', 'srv/rollcall'],
  ])('when rollcall is installed under a path as %s makes, then the page, its style and its script are served', async (_by, installedAt) => {
    const app = express().use(dashboardRoutes(dashboardUnder(installedAt)));
    const files: Array<[url: string, file: string, type: string]> = [
      ['/', 'index.html', 'text/html'],
      ['/dashboard/style.css', 'style.css', 'text/css'],
      ['/dashboard/app.js', 'build/dashboard/app.js', 'text/javascript'],
    ];
    for (const [url, file, type] of files) {
      const res = await request(app).get(url);
      expect({ url, status: res.status, type: res.type, body: res.text }).toEqual({ url, status: 200, type, body: `the dashboard's ${file}` });
    }
  });
});
