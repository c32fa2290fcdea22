import autocannon from 'autocannon';

export interface LoadResult {
  requests: number;
  non2xx: number;
  errors: number;
  seconds: number;
  rps: number;
  p50: number;
  p99: number;
}

export interface LoadOptions {
  url: string;
  connections: number;
  /** Stop after this many requests … */
  amount?: number;
  /** … or after this many seconds. */
  duration?: number;
  method?: 'GET' | 'POST';
  /** Builds each request's body (called once per request). */
  body?: () => string;
}

/** Drives one endpoint with autocannon over keep-alive connections and sums up what it saw. */
export async function load(options: LoadOptions): Promise<LoadResult> {
  const result = await autocannon({
    url: options.url,
    connections: options.connections,
    ...(options.amount ? { amount: options.amount } : { duration: options.duration ?? 10 }),
    requests: [
      {
        method: options.method ?? 'POST',
        headers: { 'content-type': 'application/json' },
        setupRequest: (req) => (options.body ? { ...req, body: options.body() } : req),
      },
    ],
  });
  const seconds = result.duration;
  const requests = result.requests.total;
  return {
    requests,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    seconds,
    rps: requests / seconds,
    p50: result.latency.p50,
    p99: result.latency.p99,
  };
}
