import { Writable } from 'node:stream';

import pino from 'pino';

import { verifySignature } from '../../src/domain/delivery';
import { RollcallOptions } from '../../src/rollcall';
import { PostCallback } from '../../src/service/postCallback';
import { Backend, backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { until } from '../helpers/realTime';
import { Receiver } from '../helpers/receiver';
import { startService, TestService } from '../helpers/service';

const GLOBAL_SECRET = 'global-callback-secret-0123';
const TOKENS = [
  { token: 'tenant-a-token-0123456789', tenant: 'a', scopes: ['produce', 'read', 'consume'], callbackSecret: 'secret-of-tenant-a-0123' },
  { token: 'tenant-b-token-0123456789', tenant: 'b', scopes: ['produce', 'read', 'consume'] },
];
const [tokenA, tokenB] = TOKENS.map((t) => t.token) as [string, string];
const tenantA = `Bearer ${tokenA}`;

/** Opens and seals an empty batch with a callback as the token's tenant: complete at once, one event due. */
async function completedWithCallback(svc: TestService, token: string, callbackUrl: string): Promise<string> {
  return (await batchWith(svc.clientWith(token), 0, { callbackUrl })).id;
}

/** A receiver listening on `host`; one that hangs never answers. */
async function receiverOn(host: string, hangs = false): Promise<Receiver> {
  const receiver = new Receiver();
  if (hangs) receiver.fallback = 'hang';
  await receiver.start(0, host);
  return receiver;
}

/** A service of these tenants whose callbacks may go to any loopback address, looked for every 100 ms. */
function serviceOfTenants(backend: Backend, tokens: object[], env: Record<string, string>, options: Omit<RollcallOptions, 'now'> = {}): Promise<TestService> {
  return startService(backend, { API_TOKENS: JSON.stringify(tokens), CALLBACK_ALLOW_HOSTS: '127.0.0.0/8', CALLBACK_POLL_INTERVAL: '100ms', ...env }, options);
}

describe.each(backends())('callback targets in a multi-tenant service (%s)', (_name, backend) => {
  let svc: TestService;
  let allowed: Receiver;
  let loopback: Receiver;
  beforeEach(async () => {
    allowed = new Receiver();
    await allowed.start(0, '127.0.0.2');
    loopback = new Receiver();
    await loopback.start();
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), CALLBACK_ALLOW_HOSTS: '127.0.0.2', CALLBACK_SECRET: GLOBAL_SECRET });
  });
  afterEach(async () => {
    await svc.stop();
    await allowed.stop();
    await loopback.stop();
  });

  it.each([
    'http://127.0.0.1:8080/cb',
    'http://10.1.2.3/cb',
    'http://169.254.169.254/latest/meta-data',
    'http://[::1]:80/',
    'http://[::ffff:127.0.0.1]/',
    'http://0.0.0.0:80/',
    'http://192.168.1.1/',
    'http://[fd00::1]/',
    'http://[::127.0.0.1]/', // IPv4-compatible
    'http://[::ffff:0:7f00:1]/', // IPv4-translated
    'http://[fec0::1]/', // site-local
    'http://[ff02::1]/',
    'http://224.0.0.1/',
    'http://255.255.255.255/',
    'http://[64:ff9b::a9fe:a9fe]/latest/meta-data', // NAT64 of 169.254.169.254
    'http://[2002:a01:203::1]/', // 6to4 of 10.1.2.3
    'http://192.0.0.192/', // IETF protocol assignments (a cloud's metadata address)
    'http://198.18.0.1/', // benchmarking, used inside some networks
    'http://[::ffff:198.19.255.254]/',
  ])('when a batch is created with callbackUrl %s, then 400 and nothing is created', async (callbackUrl) => {
    const res = await svc.api.post('/v1/batches').set('Authorization', tenantA).send({ callbackUrl });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await svc.api.get('/v1/batches').set('Authorization', tenantA)).body.batches).toEqual([]);
  });

  it.each(['http://203.0.113.7/cb', 'http://[64:ff9b::203.0.113.7]/cb', 'http://[2001:db8::7]/cb'])(
    'when a batch is created with the public callbackUrl %s (NAT64 as an IPv6-only network with DNS64 names one), then it is taken',
    async (callbackUrl) => {
      const res = await svc.api.post('/v1/batches').set('Authorization', tenantA).send({ callbackUrl });
      expect([res.status, res.body.callbackUrl]).toEqual([201, callbackUrl]);
    },
  );

  it('when the address is in CALLBACK_ALLOW_HOSTS (127.0.0.2), then the callback is delivered', async () => {
    const id = await completedWithCallback(svc, tokenA, allowed.url);
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
    expect(JSON.parse(allowed.deliveries[0]!.body)).toMatchObject({ event: 'batch.completed', tenant: 'a', batch: { id } });
  });

  it('when a host name resolves to loopback, then nothing is sent and lastError says only "refused"', async () => {
    const id = await completedWithCallback(svc, tokenA, loopback.url.replace('127.0.0.1', 'localhost'));
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
    expect(loopback.deliveries).toHaveLength(0);
    const [event] = (await svc.api.get(`/v1/batches/${id}/events`).set('Authorization', tenantA)).body.events;
    expect(event).toMatchObject({ status: 'pending', attempts: 1, lastError: 'refused: private address' });
  });

  it('when an allowed receiver refuses connections, then lastError is "connection failed"', async () => {
    const id = await completedWithCallback(svc, tokenA, 'http://127.0.0.2:9/cb');
    await svc.rollcall.dispatcher.deliverDue();
    const [event] = (await svc.api.get(`/v1/batches/${id}/events`).set('Authorization', tenantA)).body.events;
    expect(event.lastError).toBe('connection failed');
  });

  it("when tenants complete batches, then each callback is signed with its tenant's secret and names the tenant", async () => {
    await completedWithCallback(svc, tokenA, allowed.url);
    await completedWithCallback(svc, tokenB, allowed.url);
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(2);
    const byTenant = new Map(allowed.deliveries.map((d) => [JSON.parse(d.body).tenant as string, d]));
    const a = byTenant.get('a')!;
    const b = byTenant.get('b')!;
    expect(verifySignature('secret-of-tenant-a-0123', a.body, a.headers['x-rollcall-signature'] as string)).toBe(true);
    expect(verifySignature(GLOBAL_SECRET, a.body, a.headers['x-rollcall-signature'] as string)).toBe(false);
    expect(verifySignature(GLOBAL_SECRET, b.body, b.headers['x-rollcall-signature'] as string)).toBe(true);
  });
});

describe.each(backends())('fair callback delivery (%s)', (_name, backend) => {
  jest.setTimeout(60_000);

  it("when hundreds of events wait on a receiver that never answers, then another tenant's callback, and the same tenant's to another host, arrive within seconds", async () => {
    const blackhole = await receiverOn('127.0.0.2', true);
    const healthy = await receiverOn('127.0.0.3');
    const svc = await serviceOfTenants(backend, TOKENS, { CALLBACK_TIMEOUT: '10s' });
    try {
      for (let i = 0; i < 200; i++) await completedWithCallback(svc, tokenA, blackhole.url);
      svc.rollcall.startBackground();
      await blackhole.waitFor(4);
      const started = Date.now();
      await completedWithCallback(svc, tokenB, healthy.url);
      await healthy.waitFor(1, 5000);
      const waited = Date.now() - started;
      console.log(`fairness (${backend.name}): the other tenant's callback arrived after ${waited} ms, 200 events hanging`);
      expect(waited).toBeLessThan(5000);
      // The hanging receiver's own tenant: its callbacks to another host are not held behind it either.
      const sameTenantStarted = Date.now();
      await completedWithCallback(svc, tokenA, healthy.url);
      await healthy.waitFor(2, 5000);
      expect(Date.now() - sameTenantStarted).toBeLessThan(5000);
    } finally {
      await blackhole.stop();
      await svc.stop();
      await healthy.stop();
    }
  });
});

describe.each(backends())('callbacks when receivers that never answer fill every slot (%s)', (_name, backend) => {
  jest.setTimeout(60_000);
  const tokenC = 'tenant-c-token-0123456789';
  const tokens = [...TOKENS, { token: tokenC, tenant: 'c', scopes: ['produce', 'read', 'consume'] }];

  it("when two tenants' receivers at six hosts hang, each tenant holding its half of the slots, then a third tenant's callback still arrives within seconds, and the hanging ones get no more than their shares", async () => {
    const hanging = await Promise.all([2, 3, 4, 5, 6, 7].map((n) => receiverOn(`127.0.0.${n}`, true)));
    const healthy = await receiverOn('127.0.0.9');
    // Attempts last up to 30 s: a callback that waits for a slot to free arrives far later than this test waits.
    const svc = await serviceOfTenants(backend, tokens, { CALLBACK_TIMEOUT: '30s' });
    const inFlight = () => hanging.reduce((n, receiver) => n + receiver.deliveries.length, 0);
    try {
      // a's at three hosts, b's at three others: 3 + 3 + 2 each (3 a tenant's most on a host, 8 its half of 16).
      for (const [i, receiver] of hanging.entries()) for (let k = 0; k < 5; k++) await completedWithCallback(svc, i < 3 ? tokenA : tokenB, receiver.url);
      svc.rollcall.startBackground();
      await until(() => inFlight() >= 16, 10_000); // every slot of CALLBACK_CONCURRENCY 16
      await completedWithCallback(svc, tokenC, healthy.url);
      await healthy.waitFor(1, 10_000);
      expect(inFlight()).toBe(16); // still each tenant's half, though attempts that stepped aside hold no slot
      const [timedOut] = (await svc.rollcall.db('outbox').whereNotNull('last_error').count({ n: '*' })) as Array<{ n: number | string }>;
      expect(Number(timedOut?.n)).toBe(0); // it came while every hanging attempt was still under way
    } finally {
      await svc.stop();
      await Promise.all([...hanging, healthy].map((receiver) => receiver.stop()));
    }
  });
});

describe('callbacks in flight when many tenants’ receivers hang (sqlite)', () => {
  jest.setTimeout(60_000);
  const [, sqlite] = backends()[0] as [string, Backend];

  it('when receivers of ten tenants at ten hosts all hang, then attempts that gave their slots back stop at four times CALLBACK_CONCURRENCY in flight', async () => {
    const tokens = Array.from({ length: 10 }, (_, i) => ({ token: `tenant-${i}-token-0123456789`, tenant: `t${i}`, scopes: ['produce', 'read', 'consume'] }));
    let inFlight = 0;
    let most = 0;
    // A receiver that never answers: each attempt ends only at its timeout, or the shutdown's cut.
    const hangs: PostCallback = (_url, _headers, _body, timeoutMs, stopping) =>
      new Promise((resolve) => {
        most = Math.max(most, ++inFlight);
        const end = () => {
          clearTimeout(timer);
          inFlight -= 1;
          resolve('timeout');
        };
        const timer = setTimeout(end, timeoutMs);
        stopping?.addEventListener('abort', end, { once: true });
      });
    // 2 slots: a tenant holds at most 1, a host 1; the cap is 8.
    const svc = await serviceOfTenants(sqlite, tokens, { CALLBACK_CONCURRENCY: '2', CALLBACK_TIMEOUT: '60s' }, { postCallback: hangs });
    try {
      for (const [i, { token }] of tokens.entries()) await completedWithCallback(svc, token, `http://127.0.0.2:${1000 + i}/cb`);
      svc.rollcall.startBackground();
      await until(() => most >= 8, 20_000); // two more each time two step aside (after 2 s)
      await new Promise((resolve) => setTimeout(resolve, 3_000)); // two more would have stepped aside meanwhile
      expect([inFlight, most]).toEqual([8, 8]);
    } finally {
      await svc.stop();
    }
  });

  it('when CALLBACK_TIMEOUT is shorter than twice the step-aside time, then a hanging attempt gives its slot back at half of its timeout, before it ends', async () => {
    const tokens = Array.from({ length: 4 }, (_, i) => ({ token: `tenant-${i}-token-0123456789`, tenant: `t${i}`, scopes: ['produce', 'read', 'consume'] }));
    let ended = 0;
    /** For each attempt, how many had ended when it started, and when it started. */
    const endedAtStart: number[] = [];
    const startedAt: number[] = [];
    const hangs: PostCallback = (_url, _headers, _body, timeoutMs, stopping) =>
      new Promise((resolve) => {
        endedAtStart.push(ended);
        startedAt.push(performance.now());
        const end = () => {
          clearTimeout(timer);
          ended += 1;
          resolve('timeout');
        };
        const timer = setTimeout(end, timeoutMs);
        stopping?.addEventListener('abort', end, { once: true });
      });
    // Attempts end at 1.5 s, under the 2 s step-aside: without the half, a slot frees only as an attempt ends.
    const svc = await serviceOfTenants(
      sqlite,
      tokens,
      { CALLBACK_CONCURRENCY: '2', CALLBACK_TIMEOUT: '1500ms', CALLBACK_POLL_INTERVAL: '50ms' },
      { postCallback: hangs },
    );
    try {
      for (const [i, { token }] of tokens.entries()) await completedWithCallback(svc, token, `http://127.0.0.2:${1000 + i}/cb`);
      svc.rollcall.startBackground();
      await until(() => endedAtStart.length >= 3, 10_000);
      // The third starts when the first two step aside at 750 ms, while they still hang (they end at 1,500 ms).
      expect(endedAtStart.slice(0, 3)).toEqual([0, 0, 0]);
      expect(startedAt[2]! - startedAt[0]!).toBeGreaterThanOrEqual(700); // not before half of the timeout: two slots, two at first
    } finally {
      await svc.stop();
    }
  });
});

describe.each(backends())('callbacks of several tenants to one receiving host (%s)', (_name, backend) => {
  jest.setTimeout(60_000);
  /** A host that tenants a and b both send callbacks to; it answers none unless a test says otherwise. */
  let shared: Receiver;
  let svc: TestService;
  beforeEach(async () => {
    shared = await receiverOn('127.0.0.2', true);
    svc = await serviceOfTenants(backend, TOKENS, { CALLBACK_TIMEOUT: '30s' });
  });
  afterEach(async () => {
    await shared.stop();
    await svc.stop();
  });

  async function completedMany(token: string, callbackUrl: string, count: number): Promise<void> {
    for (let i = 0; i < count; i++) await completedWithCallback(svc, token, callbackUrl);
  }

  it("when one tenant's events hang at a host that others use too, then another tenant's callback to that host still arrives within seconds", async () => {
    // A shared webhook host: tenant a's endpoint on it never answers, tenant b's answers at once.
    shared.answerFor = (delivery) => (JSON.parse(delivery.body).tenant === 'a' ? 'hang' : 200);
    await completedMany(tokenA, `${shared.url}/a`, 50);
    svc.rollcall.startBackground();
    await shared.waitFor(3);
    await new Promise((resolve) => setTimeout(resolve, 300)); // a's deliveries take every slot they may
    const hanging = shared.deliveries.length;
    const started = Date.now();
    const b = await completedWithCallback(svc, tokenB, `${shared.url}/b`);
    await until(() => shared.deliveries.some((d) => d.body.includes(b)), 5000);
    console.log(`shared host (${backend.name}): tenant b's callback arrived after ${Date.now() - started} ms, ${hanging} of a's hanging there`);
    // a alone used every slot of the host (4 of CALLBACK_CONCURRENCY 16) but the one kept for others.
    expect(hanging).toBe(3);
  });

  it("when two tenants' events are due at once for a host where they hang, then each tenant holds half of its slots", async () => {
    // a's are older: taken oldest first with no share by tenant, a would hold all the host's slots it may.
    await completedMany(tokenA, `${shared.url}/a`, 20);
    await completedMany(tokenB, `${shared.url}/b`, 5);
    svc.rollcall.startBackground();
    await shared.waitFor(4);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const tenants = shared.deliveries.map((d) => JSON.parse(d.body).tenant as string).sort();
    expect(tenants).toEqual(['a', 'a', 'b', 'b']);
  });

  it("when one tenant's backlog at a host fills a claim's read, then the same claim still takes its events for another host", async () => {
    const other = await receiverOn('127.0.0.3', true);
    try {
      // More than one read's window (4 per free slot) of a's events at the shared host, older than those for the other.
      await completedMany(tokenA, shared.url, 70);
      await completedMany(tokenA, other.url, 5);
      // One claim, no background loop: the most a may hold at each host (all but one of its 4 slots).
      expect(await svc.rollcall.dispatcher.startDue()).toBe(6);
      await until(() => shared.deliveries.length + other.deliveries.length === 6, 5000);
      expect([shared.deliveries.length, other.deliveries.length]).toEqual([3, 3]);
    } finally {
      await other.stop();
    }
  });
});

describe.each(backends())('the log of tenants’ failing callbacks (%s)', (_name, backend) => {
  it('when a tenant’s receiver refuses every callback, then the log warns once a second per tenant, with how many it quieted, and each event still keeps its error', async () => {
    const lines: Array<{ level: number; msg: string; tenant?: string; quieted?: number }> = [];
    const log = pino({ level: 'debug' }, new Writable({ write: (chunk, _enc, done) => (lines.push(JSON.parse(String(chunk))), done()) }));
    const refusing = await receiverOn('127.0.0.2');
    refusing.fallback = 500;
    const svc = await serviceOfTenants(backend, TOKENS, {}, { log });
    try {
      for (let i = 0; i < 12; i++) await completedWithCallback(svc, tokenA, refusing.url);
      for (let i = 0; i < 2; i++) await completedWithCallback(svc, tokenB, refusing.url);
      expect(await svc.rollcall.dispatcher.deliverDue()).toBe(14);
      const failed = lines.filter((line) => line.msg === 'callback delivery failed');
      const warned = failed.filter((line) => line.level === 40);
      expect(failed).toHaveLength(14);
      expect(new Set(warned.map((line) => line.tenant))).toEqual(new Set(['a', 'b']));
      expect(warned.length).toBeLessThanOrEqual(4); // one per tenant, unless the attempts spanned a second
      const [kept] = (await svc.rollcall.db('outbox').where('last_error', 'http 500').count({ n: '*' })) as Array<{ n: number | string }>;
      expect(Number(kept?.n)).toBe(14);

      // A second round, a second later: each tenant's warning says how many went to debug meanwhile.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      svc.clock.now += 60_000;
      await svc.rollcall.dispatcher.deliverDue();
      const quieted = lines.filter((line) => line.msg === 'callback delivery failed' && line.level === 40 && line.tenant === 'a').at(-1)?.quieted;
      expect(quieted).toBeGreaterThanOrEqual(8);
    } finally {
      await svc.stop();
      await refusing.stop();
    }
  });
});
