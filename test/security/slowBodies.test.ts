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

  it('when it stalls past REQUEST_TIMEOUT, then it is answered 408 request_timeout, its connection closed both ways, and nothing is done, even if the rest comes after', async () => {
    const SQLITE_PATH = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-slow-')), 'x.sqlite');
    const service = await spawnService({ SQLITE_PATH, REQUEST_TIMEOUT: '1s' });
    try {
      const { port } = new URL(service.url);
      // A client that keeps its side open when the server ends its own, as a raw socket may.
      const socket = connect({ port: Number(port), host: '127.0.0.1', allowHalfOpen: true });
      socket.on('error', () => undefined);
      await once(socket, 'connect');
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
      // Half of a body that inflates to far more (a megabyte of JSON whitespace), then nothing.
      const body = zlib.gzipSync(`{"userKey":"slow"${' '.repeat(1_000_000)}}`);
      const [first, rest] = [body.subarray(0, body.length / 2), body.subarray(body.length / 2)];
      const chunk = (bytes: Buffer) => `${bytes.length.toString(16)}\r\n${bytes.toString('latin1')}\r\n`;
      socket.write(
        'POST /v1/batches HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n',
      );
      socket.write(chunk(first), 'latin1');
      const started = performance.now();
      await once(socket, 'end');
      expect(performance.now() - started).toBeLessThan(5_000); // Node's own limit: 300 s
      expect(received).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
      expect(JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4))).toMatchObject({ error: { code: 'request_timeout' } });
      // The rest of the body, after the answer: it must not be read, nor the request run.
      socket.write(`${chunk(rest)}0\r\n\r\n`, 'latin1');
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect((await call(`${service.url}/v1/batches`, 'GET')).body.batches).toEqual([]);
      socket.destroy();
    } finally {
      await service.stop();
    }
  });
});
