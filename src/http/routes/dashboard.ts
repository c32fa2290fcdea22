import fs from 'node:fs';
import path from 'node:path';

import { RequestHandler, Router } from 'express';

/** The folder holding package.json (the same from src/ under tsx and from dist/src/ when built). */
function packageRoot(): string {
  let dir = __dirname;
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error('package.json not found above the dashboard route');
    dir = parent;
  }
  return dir;
}

/** Only this service's own scripts, styles and API: nothing from other hosts. */
const contentSecurity: RequestHandler = (_req, res, next) => {
  res.setHeader('content-security-policy', "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
  res.setHeader('x-content-type-options', 'nosniff');
  next();
};

/**
 * GET / serves the dashboard page; its script is compiled from dashboard/app.ts by `npm run build`.
 * `dir`: the folder of its files (the package's dashboard/). Each is sent from `dir` as its root:
 * given a whole path instead, `send` refused any path with a folder whose name starts with a dot, so
 * an install under `node_modules/.pnpm/` or `~/.npm/_npx/` answered 404 for the whole dashboard.
 */
export function dashboardRoutes(dir = path.join(packageRoot(), 'dashboard')): Router {
  const router = Router();
  const fromDir = { root: dir };
  router.get('/', contentSecurity, (_req, res) => res.sendFile('index.html', fromDir));
  router.get('/dashboard/style.css', contentSecurity, (_req, res) => res.sendFile('style.css', fromDir));
  router.get('/dashboard/app.js', contentSecurity, (_req, res) => res.type('text/javascript').sendFile('build/dashboard/app.js', fromDir));
  return router;
}
