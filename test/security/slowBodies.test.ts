import { once } from 'node:events';
import fs from 'node:fs';
import { connect } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';

import { call, spawnService } from '../helpers/processes';

/**
 * A body that stops arriving holds what was read of it (inflated, when compressed) until the
 * request's time ends: REQUEST_TIMEOUT, where Node's own was 300 s. The service as started
 * (main.ts), with the setting read from the environment.
 */
describe('a request whose body stops arriving', () => {
  jest.setTimeout(30_000);

  it('when it stalls past REQUEST_TIMEOUT, then it is answered 408 request_timeout, its connection closed, and nothing is done', async () => {
    const SQLITE_PATH = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-slow-')), 'x.sqlite');
    const service = await spawnService({ SQLITE_PATH, REQUEST_TIMEOUT: '1s' });
    try {
      const { port } = new URL(service.url);
      const socket = connect(Number(port), '127.0.0.1');
      await once(socket, 'connect');
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
      // A little of a body that inflates to far more, then nothing.
      const inflating = zlib.gzipSync(`{"userKey":"${' '.repeat(1_000_000)}`).subarray(0, 1_500);
      socket.write(
        'POST /v1/batches HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n',
      );
      socket.write(`${inflating.length.toString(16)}\r\n`);
      socket.write(inflating);
      socket.write('\r\n');
      const started = performance.now();
      await once(socket, 'close');
      expect(performance.now() - started).toBeLessThan(5_000); // Node's own limit: 300 s
      expect(received).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
      expect(JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4))).toMatchObject({ error: { code: 'request_timeout' } });
      expect((await call(`${service.url}/v1/batches`, 'GET')).body.batches).toEqual([]);
    } finally {
      await service.stop();
    }
  });
});
