import { HttpSend, httpSend, RollcallClient } from '../../src/client';

/**
 * The client's own way of sending (httpSend), passing every request through and keeping score of ack
 * calls, as the service saw them: how many calls, how many IDs, and which batches each answer
 * reported as completed.
 */
export interface AckTally {
  calls: number;
  ids: number;
  /** IDs acked `failed` in calls the service answered (a call sent again after no answer counts once). */
  failedIds: number;
  largestCall: number;
  /** batch ID → how many ack answers reported it completed (exactly once is the contract). */
  completions: Map<string, number>;
  fetch: HttpSend;
  /** Resolves once no ack call is out: every answer sent so far has been counted. */
  settled(): Promise<void>;
}

export function countingFetch(): AckTally {
  const send = httpSend();
  const out = new Set<Promise<unknown>>();
  const tally: AckTally = {
    calls: 0,
    ids: 0,
    failedIds: 0,
    largestCall: 0,
    completions: new Map(),
    fetch: (url, request) => {
      const counted = count(url, request);
      out.add(counted);
      void counted.catch(() => undefined).finally(() => out.delete(counted));
      return counted;
    },
    settled: async () => {
      while (out.size > 0) await Promise.allSettled([...out]);
    },
  };
  const count: HttpSend = async (url, request) => {
    const response = await send(url, request);
    if (!url.endsWith('/v1/acks') || request.method !== 'POST') return response;
    const body = JSON.parse(String(request.body)) as { ids: string[]; outcome?: string };
    const sent = body.ids.length;
    tally.calls += 1;
    tally.ids += sent;
    tally.largestCall = Math.max(tally.largestCall, sent);
    if (response.ok) {
      if (body.outcome === 'failed') tally.failedIds += sent;
      const answer = JSON.parse(await response.text()) as { completed: Array<{ id: string }> }; // httpSend's text() may be read again
      for (const batch of answer.completed) tally.completions.set(batch.id, (tally.completions.get(batch.id) ?? 0) + 1);
    }
    return response;
  };
  return tally;
}

/**
 * A client whose every call carries the token `tokenNow()` gives at the time (a token the service
 * refuses, then the right one once "the operator fixed it"), counting its token look-ups
 * (`GET /v1/whoami`) and its ack calls.
 */
export function swappingToken(baseUrl: string, tokenNow: () => string): { client: RollcallClient; seen: { whoami: number; acks: number } } {
  const send = httpSend();
  const seen = { whoami: 0, acks: 0 };
  const client = new RollcallClient({
    baseUrl,
    token: tokenNow(),
    fetch: (url, request) => {
      if (url.endsWith('/v1/whoami')) seen.whoami += 1;
      if (url.endsWith('/v1/acks')) seen.acks += 1;
      return send(url, { ...request, headers: { ...request.headers, authorization: `Bearer ${tokenNow()}` } });
    },
  });
  return { client, seen };
}

/**
 * A client whose acks rollcall answers `503` while `refusing` (an outage the test ends), or `401`
 * (a token refused) when asked; its other calls go through.
 */
export function acksRefusedWhile(baseUrl: string, status: 503 | 401 = 503): { client: RollcallClient; refusing: boolean } {
  const send = httpSend();
  const code = status === 503 ? 'unavailable' : 'unauthorized';
  const outage: { client: RollcallClient; refusing: boolean } = {
    refusing: true,
    client: new RollcallClient({
      baseUrl,
      fetch: (url, request) =>
        outage.refusing && url.endsWith('/v1/acks')
          ? Promise.resolve(new Response(`{"error":{"code":"${code}","message":"away"}}`, { status }))
          : send(url, request),
    }),
  };
  return outage;
}
