/**
 * A fetch that passes every request through and keeps score of ack calls, as the service saw them:
 * how many calls, how many IDs, and which batches each answer reported as completed.
 */
export interface AckTally {
  calls: number;
  ids: number;
  largestCall: number;
  /** batch ID → how many ack answers reported it completed (exactly once is the contract). */
  completions: Map<string, number>;
  fetch: typeof fetch;
}

export function countingFetch(): AckTally {
  const tally: AckTally = {
    calls: 0,
    ids: 0,
    largestCall: 0,
    completions: new Map(),
    fetch: async (input, init) => {
      const response = await fetch(input, init);
      if (!String(input).endsWith('/v1/acks') || init?.method !== 'POST') return response;
      const sent = (JSON.parse(String(init.body)) as { ids: string[] }).ids.length;
      tally.calls += 1;
      tally.ids += sent;
      tally.largestCall = Math.max(tally.largestCall, sent);
      if (response.ok) {
        const body = (await response.clone().json()) as { completed: Array<{ id: string }> };
        for (const batch of body.completed) tally.completions.set(batch.id, (tally.completions.get(batch.id) ?? 0) + 1);
      }
      return response;
    },
  };
  return tally;
}
