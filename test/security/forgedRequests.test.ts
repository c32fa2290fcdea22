import net from 'node:net';

import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

const FORM_TYPES = ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'Text/Plain; charset=utf-8'];

describe.each(backends())('requests a browser page could forge (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend);
  });
  afterAll(() => svc.stop());

  const count = async () => (await svc.api.get('/v1/batches?limit=500')).body.batches.length as number;

  it.each(FORM_TYPES)('when a form posts %s to create a batch, with or without a body, then 415 and nothing is created', async (type) => {
    const before = await count();
    for (const body of ['{}', 'userKey=x', '']) {
      const res = await svc.api.post('/v1/batches').set('Content-Type', type).send(body);
      expect(res.status).toBe(415);
      expect(res.body.error.code).toBe('unsupported_media_type');
    }
    expect(await count()).toBe(before);
  });

  it.each(FORM_TYPES)(
    "when a browser's form on another site posts %s (with its Origin and Sec-Fetch-Site), then 415 as for any form, and nothing is created",
    async (type) => {
      const before = await count();
      const res = await svc.api
        .post('/v1/batches')
        .set('Content-Type', type)
        .set('Origin', 'https://evil.example')
        .set('Sec-Fetch-Site', 'cross-site')
        .send('userKey=x');
      expect([res.status, res.body.error.code]).toEqual([415, 'unsupported_media_type']);
      expect(await count()).toBe(before);
    },
  );

  it('when a form posts to seal, sweep or delete, then 415 and the batch is untouched', async () => {
    const { id } = await batchWith(svc.client, 1, { sealed: false });
    expect((await svc.api.post(`/v1/batches/${id}/seal`).set('Content-Type', 'text/plain').send('')).status).toBe(415);
    expect((await svc.api.post('/v1/admin/sweep').set('Content-Type', 'application/x-www-form-urlencoded').send('')).status).toBe(415);
    expect((await svc.api.delete(`/v1/batches/${id}`).set('Content-Type', 'multipart/form-data; boundary=y').send('')).status).toBe(415);
    expect((await svc.api.get(`/v1/batches/${id}`)).body).toMatchObject({ state: 'open', total: 1 });
  });

  it('when a bodiless call carries no content type (curl -XPOST …/seal), then it is served', async () => {
    const id = (await svc.api.post('/v1/batches').send({})).body.id as string;
    const sealed = await svc.api.post(`/v1/batches/${id}/seal`);
    expect(sealed.status).toBe(200);
    expect(sealed.body.state).toBe('complete');
  });

  it.each([
    ['Sec-Fetch-Site', 'cross-site'],
    ['Sec-Fetch-Site', 'same-site'],
    ['Origin', 'https://evil.example'],
    ['Origin', 'null'],
  ])('when a bodiless POST (no-cors fetch, sendBeacon) carries %s: %s, then 403 and nothing changes', async (header, value) => {
    const before = await count();
    const created = await svc.api.post('/v1/batches').set(header, value);
    expect(created.status).toBe(403);
    expect(created.body.error.code).toBe('forbidden');
    expect((await svc.api.post('/v1/admin/sweep').set(header, value)).status).toBe(403);
    expect(await count()).toBe(before);
  });

  it.each([
    ['Sec-Fetch-Site', 'cross-site'],
    ['Sec-Fetch-Site', 'same-site'],
    ['Origin', 'https://evil.example'],
  ])(
    'when a GET (an <img>, a no-cors fetch) carries %s: %s, then 403: a page of another site reads nothing, nor spends the rate budget',
    async (header, value) => {
      const read = await svc.api.get('/v1/batches').set(header, value);
      expect([read.status, read.body.error?.code]).toEqual([403, 'forbidden']);
      expect((await svc.api.get('/v1/batches').set('Sec-Fetch-Site', 'none')).status).toBe(200); // an address typed or bookmarked
      expect((await svc.api.get('/v1/batches').set('Sec-Fetch-Site', 'same-origin')).status).toBe(200); // the dashboard's own
    },
  );

  it('when the dashboard itself writes (same origin), then it is served', async () => {
    const res = await svc.api
      .post('/v1/batches')
      .set('Sec-Fetch-Site', 'same-origin')
      .set('Origin', 'http://127.0.0.1:8080')
      .set('Host', '127.0.0.1:8080')
      .send({});
    expect(res.status).toBe(201);
  });

  it.each(['evil.example', 'evil.example:8080', '10.0.0.5', 'localhost.evil.example'])(
    'when the Host is %s on a token-less loopback service, then 421 and nothing is read or changed',
    async (host) => {
      const before = await count();
      const list = await svc.api.get('/v1/batches').set('Host', host);
      expect(list.status).toBe(421);
      expect(list.body.error.code).toBe('misdirected_request');
      expect((await svc.api.post('/v1/batches').set('Host', host).send({})).status).toBe(421);
      expect((await svc.api.get('/').set('Host', host)).status).toBe(421);
      expect(await count()).toBe(before);
    },
  );

  it.each(['localhost', 'localhost:8080', '127.0.0.1:1', '[::1]', '[::1]:8080', '127.0.0.2'])('when the Host is %s, then it is served', async (host) => {
    expect((await svc.api.get('/v1/batches').set('Host', host)).status).toBe(200);
  });
});

describe.each(backends())('Host checks with tokens, and without tokens beyond loopback (%s)', (_name, backend) => {
  it('when tokens are configured, then any Host is served', async () => {
    const token = { token: 'host-test-token-0123456789', tenant: 't', scopes: ['read'] };
    const svc = await startService(backend, { API_TOKENS: JSON.stringify([token]), HOST: '0.0.0.0' });
    try {
      const res = await svc.api.get('/v1/batches').set('Host', 'rollcall.internal:8080').set('Authorization', `Bearer ${token.token}`);
      expect(res.status).toBe(200);
    } finally {
      await svc.stop();
    }
  });

  describe('a token-less service listening beyond loopback (the Docker image: HOST=0.0.0.0, published on 127.0.0.1:8080)', () => {
    let svc: TestService;
    beforeAll(async () => {
      svc = await startService(backend, { HOST: '0.0.0.0', ALLOWED_HOSTS: 'rollcall.example.com' });
    });
    afterAll(async () => {
      await svc.stop();
    });
    const count = async () => (await svc.api.get('/v1/batches').set('Host', 'localhost')).body.batches.length as number;

    it.each(['evil.example', 'evil.example:8080', 'rollcall.internal:8080', 'localhost.evil.example', 'example.com.'])(
      'when the Host is %s (a name a web page can rebind to this address), then 421 and nothing is read or changed',
      async (host) => {
        const before = await count();
        const list = await svc.api.get('/v1/batches').set('Host', host);
        expect([list.status, list.body.error?.code]).toEqual([421, 'misdirected_request']);
        // Same-origin to the rebinding page, so the cross-site check alone would let it through.
        expect((await svc.api.post('/v1/batches').set('Host', host).set('Origin', `http://${host}`).send({})).status).toBe(421);
        expect((await svc.api.get('/').set('Host', host)).status).toBe(421);
        expect(await count()).toBe(before);
      },
    );

    it.each([
      '127.0.0.1:8080',
      'localhost:8080',
      'app.localhost',
      '10.0.0.5:8080',
      '[fd00::1]:8080',
      'rollcall:8080',
      'ROLLCALL.example.com',
      'rollcall.example.com.:8080',
    ])('when the Host is %s (an address, localhost, a one-label service name, or a name in ALLOWED_HOSTS), then it is served', async (host) => {
      expect((await svc.api.get('/v1/batches').set('Host', host)).status).toBe(200);
    });

    it('when a request has no Host (an HTTP/1.0 health check), then it is served', async () => {
      const { port } = new URL(svc.url);
      const answer = await new Promise<string>((resolve, reject) => {
        const socket = net.connect(Number(port), '127.0.0.1', () => socket.end('GET /healthz HTTP/1.0\r\n\r\n'));
        let text = '';
        socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
        socket.on('end', () => resolve(text));
        socket.on('error', reject);
      });
      expect(answer.split('\r\n')[0]).toBe('HTTP/1.1 200 OK');
    });
  });
});
