import dns from 'node:dns';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { ConfigError, loadConfig } from '../src/config';
import { call, spawnService } from './helpers/processes';
import { Receiver } from './helpers/receiver';
import { itemIds } from './helpers/service';

describe('configuration', () => {
  it('when nothing is set, then the documented defaults apply', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      PORT: 8080,
      HOST: '127.0.0.1',
      GROUP_SIZE: 8192,
      SQLITE_PATH: './data/rollcall.sqlite',
      OPEN_BATCH_TTL: 7 * 86_400_000,
      HEAP_GROWTH_PERCENT: 100,
      DB_QUERY_TIMEOUT: 30_000,
      tokens: null,
    });
    expect(config.DATABASE_URL).toBeUndefined();
  });

  it.each([
    ['PORT', 'eighty'],
    // What Number() reads but no one means: a blank value (0, a random port), exponents, hex.
    ['PORT', ' '],
    ['PORT', '1e3'],
    ['DB_POOL_SIZE', '0x10'],
    ['GROUP_SIZE', '100'],
    ['DATABASE_URL', 'redis://x'],
    ['OPEN_BATCH_TTL', 'a week'],
    ['LOG_LEVEL', 'loud'],
    ['HEAP_GROWTH_PERCENT', '500'],
    ['DB_QUERY_TIMEOUT', 'soon'],
    // Not above LOCK_TIMEOUT (2 s): a lock wait would be cut short.
    ['DB_QUERY_TIMEOUT', '2s'],
    // Past what Node's timers take (~24.8 days): such a timer fires at once.
    ['DB_QUERY_TIMEOUT', '25d'],
    ['SWEEP_INTERVAL', '30d'],
    ['LOCK_TIMEOUT', '25d'],
    ['API_TOKENS', '[{"token":"short","tenant":"a","scopes":["read"]}]'],
    ['API_TOKENS', 'not json'],
    // Taken before, yet never matching a host: a space, a port, a scheme.
    ['CALLBACK_ALLOW_HOSTS', 'foo bar'],
    ['CALLBACK_ALLOW_HOSTS', 'hooks.internal:8080'],
    ['CALLBACK_ALLOW_HOSTS', 'http://hooks.internal'],
    ['API_TOKENS', '[{"token":"a-long-enough-token-123","tenant":"a\\u0000b","scopes":["read"]}]'],
    // One tenant's callbacks are signed with one secret: two would leave it to the entries' order.
    [
      'API_TOKENS',
      '[{"token":"a-long-enough-token-123","tenant":"a","scopes":["read"],"callbackSecret":"first-secret-0123456"},' +
        '{"token":"a-long-enough-token-456","tenant":"a","scopes":["read"],"callbackSecret":"second-secret-012345"}]',
    ],
    // Names are not taken (resolving them would need a resolver); port 0 aborted the process in Node's setServers.
    ['CALLBACK_DNS_SERVERS', 'dns.internal:53'],
    ['CALLBACK_DNS_SERVERS', '10.0.0.53:0'],
    ['CALLBACK_DNS_SERVERS', '10.0.0.53:65536'],
    ['CALLBACK_DNS_SERVERS', '[10.0.0.53]:53'],
    ['CALLBACK_DNS_SERVERS', '[fd00::53]'],
    ['CALLBACK_DNS_SERVERS', 'fe80::53%eth0'],
    ['CALLBACK_DNS_SERVERS', '[fe80::53%eth0]:53'],
    // A Host header's name only: never a port or a scheme (a Host is compared without its port).
    ['ALLOWED_HOSTS', 'rollcall.example.com:8080'],
    ['ALLOWED_HOSTS', 'https://rollcall.example.com'],
    ['ALLOWED_HOSTS', '*.example.com'],
    // The RateLimit headers and Retry-After count whole seconds: a shorter window would be told as one.
    ['TENANT_RATE_WINDOW', '500ms'],
    ['TENANT_RATE_WINDOW', '1500ms'],
    ['TENANT_RATE_LIMIT', '-1'],
    // 0 would end every drain at once (exit 1); elsewhere 0 means "no limit" or "off".
    ['SHUTDOWN_TIMEOUT_MS', '0'],
    ['SHUTDOWN_TIMEOUT_MS', '999'],
    // Set but empty (a compose file's ${VAR} on a host without it): unset, each means something else.
    ['API_TOKENS', ''],
    ['API_TOKENS_FILE', ''],
    ['DATABASE_URL', ''],
    ['DATABASE_URL', ' '],
    ['CALLBACK_SECRET', ''],
    // Below a kilobyte nearly every call's body is refused (413): the service started, and did nothing.
    ['BODY_LIMIT', '0b'],
    ['BODY_LIMIT', '1023b'],
  ])('when %s is %s, then loading stops with a message naming the key', (key, value) => {
    expect(() => loadConfig({ [key]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [key]: value })).toThrow(new RegExp(key));
  });

  it('when CALLBACK_ALLOW_HOSTS lists names, addresses and CIDRs, then they are taken', () => {
    const entries = ['hooks.internal', 'under_score.internal', 'LOCALHOST', '10.0.0.7', 'fd00::1', '10.0.0.0/8', 'fd00::/8'];
    expect(loadConfig({ CALLBACK_ALLOW_HOSTS: entries.join(', ') }).CALLBACK_ALLOW_HOSTS).toEqual(entries);
  });

  it('when ALLOWED_HOSTS lists names, then they are taken', () => {
    expect(loadConfig({ ALLOWED_HOSTS: 'rollcall.example.com, my_service.internal' }).ALLOWED_HOSTS).toEqual(['rollcall.example.com', 'my_service.internal']);
    expect(loadConfig({}).ALLOWED_HOSTS).toEqual([]);
  });

  it("when CALLBACK_DNS_SERVERS lists addresses, with ports or without, then they are taken as Node's resolver takes them", () => {
    const entries = ['10.0.0.53', '10.0.0.54:5353', 'fd00::53', '[fd00::54]:5353'];
    expect(loadConfig({ CALLBACK_DNS_SERVERS: entries.join(' , ') }).CALLBACK_DNS_SERVERS).toEqual(entries);
    expect(() => new dns.Resolver().setServers(entries)).not.toThrow();
    expect(loadConfig({}).CALLBACK_DNS_SERVERS).toEqual([]);
  });

  it.each(['mysql://u:p@db:3306/rc', 'postgres://u:p@db:5432/rc', 'postgresql://u:p@db/rc?sslmode=require'])(
    'when DATABASE_URL is %s, then it is taken',
    (url) => {
      expect(loadConfig({ DATABASE_URL: url }).DATABASE_URL).toBe(url);
    },
  );

  it('when DATABASE_URL names another database, then the message names the three accepted forms', () => {
    expect(() => loadConfig({ DATABASE_URL: 'redis://x' })).toThrow(/mysql:\/\/, postgres:\/\/ or postgresql:\/\//);
  });

  it('when DB_POOLER is transaction, then it is taken for PostgreSQL and refused for MySQL, SQLite and unknown modes', () => {
    expect(loadConfig({ DATABASE_URL: 'postgres://u@pgbouncer:6432/rc', DB_POOLER: 'transaction' }).DB_POOLER).toBe('transaction');
    expect(loadConfig({}).DB_POOLER).toBe('none');
    expect(() => loadConfig({ DATABASE_URL: 'mysql://u@db/rc', DB_POOLER: 'transaction' })).toThrow(/DB_POOLER: transaction is for a PostgreSQL DATABASE_URL/);
    expect(() => loadConfig({ DB_POOLER: 'transaction' })).toThrow(/DB_POOLER/);
    expect(() => loadConfig({ DATABASE_URL: 'postgres://u@db/rc', DB_POOLER: 'statement' })).toThrow(/DB_POOLER/);
  });

  it.each([
    ['a space', 'correct horse battery staple'],
    ['a tab', 'a-long-enough\ttoken-123'],
    ['a no-break space', 'a-long-enough\u00a0token-123'],
    ['a character past Latin-1', 'a-long-enough-token-\u20ac\u20ac'],
  ])('when a token holds %s, which no Authorization header can carry to match, then it is refused at start', (_what, token) => {
    expect(() => loadConfig({ API_TOKENS: JSON.stringify([{ token, tenant: 'a', scopes: ['read'] }]) })).toThrow(/a token is sent in a header/);
  });

  it('when a token holds Latin-1 letters (which a Node client sends as they are), then it is taken', () => {
    expect(loadConfig({ API_TOKENS: JSON.stringify([{ token: 'a-long-enough-token-\u00e4\u00f6', tenant: 'a', scopes: ['read'] }]) }).tokens).toHaveLength(1);
  });

  it('when two tokens of one tenant carry the same callbackSecret, or only one carries it, then both are taken', () => {
    const entry = (token: string, callbackSecret?: string) => ({ token, tenant: 'a', scopes: ['read'], ...(callbackSecret ? { callbackSecret } : {}) });
    const same = [entry('a-long-enough-token-123', 'the-secret-0123456789'), entry('a-long-enough-token-456', 'the-secret-0123456789')];
    expect(loadConfig({ API_TOKENS: JSON.stringify(same) }).tokens).toHaveLength(2);
    const one = [entry('a-long-enough-token-123', 'the-secret-0123456789'), entry('a-long-enough-token-456')];
    expect(loadConfig({ API_TOKENS: JSON.stringify(one) }).tokens).toHaveLength(2);
    const error = (() => {
      try {
        const third = entry('a-long-enough-token-abc', 'a-third-secret-0123456');
        loadConfig({ API_TOKENS: JSON.stringify([...same, entry('a-long-enough-token-789', 'another-secret-012345'), third]) });
      } catch (caught) {
        return caught as Error;
      }
    })();
    expect(error?.message.match(/tenant 'a' has two callbackSecrets/g)).toHaveLength(1); // three secrets: said once
    expect(error?.message).not.toContain('the-secret-0123456789'); // secrets stay out of the message
  });

  it('when tokens come from a file, then they are read from it', () => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rc-')), 'tokens.json');
    fs.writeFileSync(file, JSON.stringify([{ token: 'a-long-enough-token-123', tenant: 't', scopes: ['read'] }]));
    expect(loadConfig({ API_TOKENS_FILE: file }).tokens).toEqual([{ token: 'a-long-enough-token-123', tenant: 't', scopes: ['read'] }]);
    expect(() => loadConfig({ API_TOKENS_FILE: `${file}.missing` })).toThrow(/API_TOKENS_FILE/);
  });

  it('when an age is longer than a timer takes, then it is taken (it is compared with timestamps, never waited)', () => {
    expect(loadConfig({ COMPLETED_RETENTION: '400d', OPEN_BATCH_TTL: '90d' })).toMatchObject({
      COMPLETED_RETENTION: 400 * 86_400_000,
      OPEN_BATCH_TTL: 90 * 86_400_000,
    });
  });

  it('when an age or retention is longer than 100 years, then it is refused (the database could not take the timestamps)', () => {
    for (const key of ['COMPLETED_RETENTION', 'OPEN_BATCH_TTL', 'CALLBACK_MAX_AGE', 'CALLBACK_BACKOFF_BASE', 'CALLBACK_BACKOFF_CAP'])
      expect(() => loadConfig({ [key]: '99999999999999d' })).toThrow(new RegExp(`${key}: .*at most 100 years`));
    expect(loadConfig({ COMPLETED_RETENTION: '36500d' }).COMPLETED_RETENTION).toBe(36_500 * 86_400_000);
    expect(() => loadConfig({ TENANT_RATE_WINDOW: '2d' })).toThrow(/TENANT_RATE_WINDOW: .*at most 1d\)/);
  });

  it('when durations are written with units, then they become milliseconds', () => {
    expect(loadConfig({ SWEEP_INTERVAL: '500ms', OPEN_BATCH_TTL: '2h', COMPLETED_RETENTION: '90' })).toMatchObject({
      SWEEP_INTERVAL: 500,
      OPEN_BATCH_TTL: 7_200_000,
      COMPLETED_RETENTION: 90_000,
    });
  });

  it('when LOCK_TIMEOUT is long and DB_QUERY_TIMEOUT unset, then statements may take 10 s beyond the longest lock wait', () => {
    expect(loadConfig({ LOCK_TIMEOUT: '60s' }).DB_QUERY_TIMEOUT).toBe(70_000);
    // MySQL waits for locks in whole seconds: 1.2 s is 2 s there.
    expect(() => loadConfig({ LOCK_TIMEOUT: '1200ms', DB_QUERY_TIMEOUT: '2s' })).toThrow(/DB_QUERY_TIMEOUT.*2000 ms/);
    expect(loadConfig({ LOCK_TIMEOUT: '1200ms', DB_QUERY_TIMEOUT: '2100ms' }).DB_QUERY_TIMEOUT).toBe(2100);
    expect(loadConfig({ LOCK_TIMEOUT: '60s', DB_QUERY_TIMEOUT: '0' }).DB_QUERY_TIMEOUT).toBe(0);
  });
});

describe('a service that cannot listen', () => {
  const sqlite = () => ({ SQLITE_PATH: path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-listen-')), 'x.sqlite') });

  it.each([['not a host'], ['999.1.1.1'], ['192.0.2.1']])("when HOST is '%s', then it stops with a message naming HOST, no stack trace", async (host) => {
    const failure = spawnService({ ...sqlite(), HOST: host }).then(
      (service) => service.stop().then(() => 'started'),
      (error: Error) => error.message,
    );
    const message = await failure;
    expect(message).toMatch(/exited with 1 before listening:\ninvalid configuration:\n {2}HOST: cannot listen on/);
    expect(message).not.toMatch(/\n {4}at /);
  });

  it('when HOST is a name whose lookup fails only after a while, then it stops without sending a callback meanwhile', async () => {
    const { SQLITE_PATH } = sqlite();
    const receiver = new Receiver();
    await receiver.start();
    const env = { SQLITE_PATH, CALLBACK_BACKOFF_BASE: '100ms', CALLBACK_POLL_INTERVAL: '100ms' };
    try {
      // A callback event due again: its first attempt was refused, then the service stopped.
      receiver.script = [500];
      const first = await spawnService(env);
      const id = (await call(`${first.url}/v1/batches`, 'POST', { callbackUrl: receiver.url })).body.id;
      const added = await call(`${first.url}/v1/batches/${id}/items`, 'POST', { count: 1 });
      await call(`${first.url}/v1/batches/${id}/seal`, 'POST', {});
      await call(`${first.url}/v1/acks`, 'POST', { ids: itemIds(id, added.body.groups) });
      await receiver.waitFor(1);
      await first.stop();
      const slowLookup = path.join(path.dirname(SQLITE_PATH), 'slow-lookup.cjs');
      fs.writeFileSync(
        slowLookup,
        `const dns = require('node:dns');
         const lookup = dns.lookup;
         dns.lookup = function (host, ...rest) {
           if (host !== 'slow-to-fail.invalid') return lookup.call(this, host, ...rest);
           setTimeout(() => rest.at(-1)(Object.assign(new Error('getaddrinfo ENOTFOUND ' + host), { code: 'ENOTFOUND' })), 1500);
         };`,
      );
      const message = await spawnService({ ...env, HOST: 'slow-to-fail.invalid', NODE_OPTIONS: `--require ${slowLookup}` }).then(
        (service) => service.stop().then(() => 'started'),
        (error: Error) => error.message,
      );
      expect(message).toMatch(/HOST: cannot listen on 'slow-to-fail.invalid'/);
      // An attempt sent by a process that then exits is never recorded, and is sent again after its lease.
      expect(receiver.deliveries).toHaveLength(1);
    } finally {
      await receiver.stop();
    }
  }, 60_000);

  it('when PORT is taken, then it stops with a message naming PORT', async () => {
    const first = await spawnService(sqlite());
    try {
      const port = new URL(first.url).port;
      const message = await spawnService({ ...sqlite(), PORT: port }).then(
        (service) => service.stop().then(() => 'started'),
        (error: Error) => error.message,
      );
      expect(message).toMatch(/invalid configuration:\n {2}PORT: cannot listen on port \d+ of '127.0.0.1' \(EADDRINUSE/);
    } finally {
      await first.stop();
    }
  });
});
