import { AddressInfo } from 'node:net';

import type { Express } from 'express';

import { createServer } from '../../src/http/server';

/** Serves an app on a free loopback port, for clients that need a real URL (through the server main.ts uses). */
export async function listen(app: Express): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
