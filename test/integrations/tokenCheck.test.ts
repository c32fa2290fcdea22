import { HttpSend, httpSend, RollcallApiError, RollcallClient } from '../../src/client';
import { TOKEN_RECHECK_MS, TokenCheck } from '../../src/integrations/tokenCheck';
import { backends } from '../helpers/backends';
import { startService, TestService } from '../helpers/service';

const RIGHT = 'the-right-token-0123456789';
const refusedAck = () => new RollcallApiError(401, 'unauthorized', 'missing or unknown bearer token');

/** The token check's own logic against a real service; which database is behind it does not matter here. */
describe.each(backends().slice(0, 1))("what a worker's process knows of its token (%s)", (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify([{ token: RIGHT, tenant: 'a', scopes: ['consume'] }]) });
  });
  afterAll(() => svc.stop());

  /** A client whose token the test swaps, and whose look-ups it counts (and may answer itself). */
  function client(token: () => string, lookUp?: HttpSend) {
    const send = httpSend();
    const seen = { lookUps: 0 };
    const made = new RollcallClient({
      baseUrl: svc.url,
      fetch: (url, request) => {
        if (!url.endsWith('/v1/whoami')) return send(url, request);
        seen.lookUps += 1;
        return (lookUp ?? send)(url, { ...request, headers: { ...request.headers, authorization: `Bearer ${token()}` } });
      },
    });
    return { made, seen };
  }

  const timed = async <T>(work: Promise<T>): Promise<[T, number]> => {
    const started = performance.now();
    const result = await work;
    return [result, performance.now() - started];
  };

  it('when an ack was refused, then the token is looked up at once; while refused, again after 5 s; once taken, a later refusal at once again', async () => {
    let token = 'a-token-the-service-does-not-know';
    const { made, seen } = client(() => token);
    const check = new TokenCheck(made);
    expect(await check.verdict()).toBeNull();
    expect(seen.lookUps).toBe(0); // nothing asked while no ack was refused

    check.learn(refusedAck());
    const [first, firstMs] = await timed(check.verdict());
    expect(first).toMatchObject({ code: 'token_refused' });
    expect(firstMs).toBeLessThan(TOKEN_RECHECK_MS / 2);

    token = RIGHT; // the operator's fix
    const [second, secondMs] = await timed(check.verdict());
    expect(second).toBeNull();
    expect(secondMs).toBeGreaterThan(TOKEN_RECHECK_MS - 500); // the next look-up, 5 s after the refusal
    expect(check.suspect).toBe(false);

    token = 'revoked-again-0123456789';
    check.learn(refusedAck());
    const [third, thirdMs] = await timed(check.verdict());
    expect(third).toMatchObject({ code: 'token_refused' });
    expect(thirdMs).toBeLessThan(TOKEN_RECHECK_MS / 2); // not 5 s after the answer that took it
    expect(seen.lookUps).toBe(3);
  }, 20_000);

  it('when many jobs come at once while the token is suspect, then they wait for one look-up, and share its answer', async () => {
    const { made, seen } = client(() => 'a-token-the-service-does-not-know');
    const check = new TokenCheck(made);
    check.learn(refusedAck());
    const verdicts = await Promise.all(Array.from({ length: 50 }, () => check.verdict()));
    expect(seen.lookUps).toBe(1);
    expect(new Set(verdicts).size).toBe(1);
    expect(verdicts[0]).toMatchObject({ code: 'token_refused' });
  });

  it("when the look-up gets a proxy's 403, or no answer in 5 s, then the token counts as taken", async () => {
    const forbidden: HttpSend = async () => ({ ok: false, status: 403, text: async () => '{"error":{"code":"forbidden","message":"blocked by a proxy"}}' });
    const behindProxy = new TokenCheck(client(() => RIGHT, forbidden).made);
    behindProxy.learn(refusedAck());
    expect(await behindProxy.verdict()).toBeNull();

    const silent = new TokenCheck(
      client(
        () => RIGHT,
        () => new Promise(() => undefined),
      ).made,
    );
    silent.learn(refusedAck());
    const [verdict, ms] = await timed(silent.verdict());
    expect(verdict).toBeNull();
    expect(ms).toBeGreaterThan(TOKEN_RECHECK_MS - 500);
  }, 20_000);
});
