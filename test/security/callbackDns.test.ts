import { ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import dns from 'node:dns';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { DnsServer } from '../helpers/dnsServer';
import { realSleep, until } from '../helpers/realTime';
import { Receiver } from '../helpers/receiver';
import { startService, TestService } from '../helpers/service';

const TOKENS = [
  { token: 'tenant-a-token-0123456789', tenant: 'a', scopes: ['produce', 'read', 'consume'] },
  { token: 'tenant-b-token-0123456789', tenant: 'b', scopes: ['produce', 'read', 'consume'] },
];
const [tokenA, tokenB] = TOKENS.map((t) => t.token) as [string, string];

/** A zone whose name servers never answer: each lookup of a name under it waits for the resolver's whole timeout. */
const SILENT_ZONE = 'silent.rollcall.test';

/** Opens and seals an empty batch with a callback as the token's tenant: complete at once, one event due. */
async function completedWithCallback(svc: TestService, token: string, callbackUrl: string): Promise<string> {
  return (await batchWith(svc.clientWith(token), 0, { callbackUrl })).id;
}

async function eventOf(svc: TestService, token: string, batchId: string) {
  return (await svc.api.get(`/v1/batches/${batchId}/events`).set('Authorization', `Bearer ${token}`)).body.events[0];
}

/** How long `count` parallel system lookups of localhost take: they queue for libuv's thread pool, as the database driver's connects do. */
async function threadPoolLookupMs(count: number): Promise<number> {
  const started = performance.now();
  await Promise.all(Array.from({ length: count }, () => dns.promises.lookup('localhost')));
  return performance.now() - started;
}

describe.each(backends())("tenants' callback host names, resolved off the thread pool (%s)", (_name, backend) => {
  jest.setTimeout(60_000);
  let dnsServer: DnsServer;
  let receiver: Receiver;
  let svc: TestService | undefined;
  beforeEach(async () => {
    dnsServer = new DnsServer({ 'hook.rollcall.test': '127.0.0.1' }, [SILENT_ZONE]);
    await dnsServer.start();
    receiver = new Receiver();
    await receiver.start();
  });
  afterEach(async () => {
    await svc?.stop();
    svc = undefined;
    await receiver.stop();
    await dnsServer.stop();
  });

  const startWith = async (env: Record<string, string>) => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS), CALLBACK_DNS_SERVERS: dnsServer.address, CALLBACK_POLL_INTERVAL: '100ms', ...env });
    return svc;
  };
  const urlAt = (host: string) => receiver.url.replace('127.0.0.1', host);

  it("when one tenant's callback names never resolve, then another tenant's callback arrives promptly and the thread pool stays free", async () => {
    const svc = await startWith({ CALLBACK_ALLOW_HOSTS: '127.0.0.1' });
    const silent: string[] = [];
    for (let i = 0; i < 24; i++) silent.push(await completedWithCallback(svc, tokenB, urlAt(`h${i}.${SILENT_ZONE}`)));
    svc.rollcall.startBackground();
    // Tenant B's half of CALLBACK_CONCURRENCY (8 of 16), every one waiting on a name server that never answers.
    await until(() => dnsServer.namesAskedUnder(SILENT_ZONE).length >= 8, 10_000);

    const started = Date.now();
    await completedWithCallback(svc, tokenA, urlAt('hook.rollcall.test'));
    const poolMs = await threadPoolLookupMs(8);
    await receiver.waitFor(1, 5000);
    const waited = Date.now() - started;
    console.log(`callback DNS (${backend.name}): tenant a's callback arrived after ${waited} ms; 8 lookups on the thread pool took ${Math.round(poolMs)} ms`);
    expect(waited).toBeLessThan(2000);
    expect(poolMs).toBeLessThan(1000);
    expect(JSON.parse(receiver.deliveries[0]!.body)).toMatchObject({ tenant: 'a' });

    // What tenant B sees: its callbacks fail once the resolver gives up (a DNS failure), and none arrives.
    const eventsOfB = () => Promise.all(silent.map((id) => eventOf(svc, tokenB, id)));
    let events = await eventsOfB();
    for (const deadline = Date.now() + 15_000; !events.some((event) => event.lastError) && Date.now() < deadline; events = await eventsOfB())
      await realSleep(200);
    expect(new Set(events.map((event) => event.status))).toEqual(new Set(['pending']));
    expect(new Set(events.map((event) => event.lastError))).toEqual(new Set([null, 'connection failed']));
    expect(receiver.deliveries.map((d) => JSON.parse(d.body).tenant)).toEqual(['a']);
  });

  it('when CALLBACK_ALLOW_HOSTS lists a name, then the system resolves it, not CALLBACK_DNS_SERVERS', async () => {
    const svc = await startWith({ CALLBACK_ALLOW_HOSTS: 'localhost, hook.rollcall.test', CALLBACK_TIMEOUT: '3s' });
    const byName = await completedWithCallback(svc, tokenA, urlAt('localhost'));
    // The tenants' DNS server knows this name; listed by name, it goes to the system's resolver, which does not.
    const notInSystem = await completedWithCallback(svc, tokenA, urlAt('hook.rollcall.test'));
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(2);
    expect(await eventOf(svc, tokenA, byName)).toMatchObject({ status: 'delivered' });
    expect(await eventOf(svc, tokenA, notInSystem)).toMatchObject({ status: 'pending', attempts: 1 });
    expect(receiver.deliveries).toHaveLength(1);
    expect(dnsServer.asked).toEqual([]);
  });

  it("when a tenant's name is localhost, under .localhost or unknown, then it is refused or fails without a delivery", async () => {
    const svc = await startWith({ CALLBACK_ALLOW_HOSTS: '127.0.0.2' });
    const loopbackNames = await Promise.all(['localhost', 'hooks.localhost', 'LOCALHOST.'].map((host) => completedWithCallback(svc, tokenA, urlAt(host))));
    const unknown = await completedWithCallback(svc, tokenA, urlAt('missing.rollcall.test'));
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(4);
    for (const id of loopbackNames) expect(await eventOf(svc, tokenA, id)).toMatchObject({ status: 'pending', lastError: 'refused: private address' });
    expect(await eventOf(svc, tokenA, unknown)).toMatchObject({ status: 'pending', lastError: 'connection failed' });
    expect(receiver.deliveries).toHaveLength(0);
    // RFC 6761: loopback names are never asked of DNS.
    expect(dnsServer.asked.map((question) => question.split(' ')[0])).toEqual(['missing.rollcall.test', 'missing.rollcall.test']);
  });
});

/**
 * Whether this machine lets a test give a process its own /etc/resolv.conf (a private mount
 * namespace: root, or an unprivileged user namespace). CI must: it runs as root.
 */
function privateResolvConfAvailable(): boolean {
  const probe = spawnSync('unshare', ['-rm', 'sh', '-c', 'mount --bind /dev/null /etc/resolv.conf'], { stdio: 'ignore' });
  if (probe.status === 0) return true;
  if (process.env.CI) throw new Error('unshare -rm with a bind mount failed: the resolv.conf test needs a private mount namespace');
  console.warn('resolv.conf test skipped: this machine refuses a private mount namespace (unshare -rm)');
  return false;
}

/** A process resolving names with the tenants' resolver, in a mount namespace where /etc/resolv.conf is `resolvConf`. */
class ResolverProcess {
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly answers: string[] = [];
  private waiting: { resolve(line: string): void; reject(error: Error): void } | null = null;
  private stderr = '';
  private exited: Error | null = null;

  constructor(resolvConf: string, recheckMs: number) {
    const tsx = path.join(__dirname, '../../node_modules/.bin/tsx');
    const script = path.join(__dirname, '../helpers/resolveByLine.ts');
    this.child = spawn('unshare', ['-rm', 'sh', '-c', 'mount --bind "$0" /etc/resolv.conf && exec "$@"', resolvConf, tsx, script], {
      env: { ...process.env, RECHECK_MS: String(recheckMs) },
    });
    this.child.stderr.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
    readline.createInterface({ input: this.child.stdout }).on('line', (line) => {
      const waiting = this.waiting;
      this.waiting = null;
      if (waiting) waiting.resolve(line);
      else this.answers.push(line);
    });
    // A child that dies fails the question it was asked, with what it said, instead of a timeout.
    this.child.on('exit', (code, signal) => {
      this.exited = new Error(`the resolver process exited (${signal ?? code}): ${this.stderr}`);
      this.waiting?.reject(this.exited);
      this.waiting = null;
    });
  }

  /** The addresses (or error) the process found for `hostname`. */
  resolve(hostname: string): Promise<unknown> {
    const answer = new Promise<string>((resolve, reject) => {
      const ready = this.answers.shift();
      if (ready !== undefined) resolve(ready);
      else if (this.exited) reject(this.exited);
      else this.waiting = { resolve, reject };
    });
    this.child.stdin.write(`${hostname}\n`);
    return answer.then((line) => JSON.parse(line));
  }

  stop(): void {
    this.child.kill();
  }
}

const describeWithPrivateResolvConf = privateResolvConfAvailable() ? describe : describe.skip;

describeWithPrivateResolvConf("tenants' resolver when resolv.conf changes", () => {
  it("when /etc/resolv.conf names other name servers, then tenants' names are asked of them from the next check on, not of the old ones for good", async () => {
    const before = new DnsServer({ 'hook.rollcall.test': '127.0.0.10' });
    const after = new DnsServer({ 'hook.rollcall.test': '127.0.0.20' });
    await Promise.all([before.start(), after.start()]);
    const resolvConf = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rollcall-resolv-')), 'resolv.conf');
    fs.writeFileSync(resolvConf, `nameserver ${before.address}\n`);
    const resolver = new ResolverProcess(resolvConf, 200);
    try {
      expect(await resolver.resolve('hook.rollcall.test')).toEqual(['127.0.0.10']);
      // Rewritten in place, as a container runtime does with the file it mounted.
      fs.writeFileSync(resolvConf, `nameserver ${after.address}\n`);
      await realSleep(400);
      expect(await resolver.resolve('hook.rollcall.test')).toEqual(['127.0.0.20']);
      expect(after.asked).toContain('hook.rollcall.test A');
    } finally {
      resolver.stop();
      await Promise.all([before.stop(), after.stop()]);
    }
  }, 30_000);
});
