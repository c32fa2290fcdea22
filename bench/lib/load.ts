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
  const started = performance.now();
  let lastResponse = started;
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      {
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
      },
      (error, done) => (error ? reject(error) : resolve(done)),
    );
    instance.on('response', () => {
      lastResponse = performance.now();
    });
  });
  // autocannon reports its duration only at its next one-second sampling tick (up to a second late),
  // so the time is taken here: from the start to the last response it counted.
  const seconds = (lastResponse - started) / 1000;
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
