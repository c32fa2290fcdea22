import http from 'node:http';

import express from 'express';

import { createServer } from '../../src/http/server';

/**
 * The HTTP ceiling: an express app with the same JSON body parser and body limit as rollcall,
 * answering every POST /v1/acks with a small JSON body and doing nothing else. With
 * NOOP_SERVER=rollcall it is served the way rollcall serves its app (src/http/server.ts), so the
 * benchmark can also show rollcall against a no-op that has the same server-side advantage.
 */
const app = express();
app.use(express.json({ limit: '2mb' }));
app.post('/v1/acks', (req, res) => {
  const ids = (req.body as { ids?: unknown[] }).ids ?? [];
  res.json({ acked: ids.length, duplicates: 0, rejected: [], completed: [] });
});
const server = process.env.NOOP_SERVER === 'rollcall' ? createServer(app) : http.createServer(app);
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`ROLLCALL_PORT=${typeof address === 'object' && address ? address.port : 0}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
