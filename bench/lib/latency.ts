import http from 'node:http';

export interface Latency {
  requests: number;
  p50: number;
  p99: number;
  max: number;
}

/** One client, one request at a time over a keep-alive connection, each timed to the microsecond (ms with decimals). */
export async function sequentialLatency(url: string, requests: number): Promise<Latency> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const times: number[] = [];
  const get = () =>
    new Promise<void>((resolve, reject) => {
      http
        .get(url, { agent }, (res) => {
          res.resume();
          res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`))));
        })
        .on('error', reject);
    });
  for (let i = 0; i < 200; i++) await get(); // warm-up
  for (let i = 0; i < requests; i++) {
    const started = performance.now();
    await get();
    times.push(performance.now() - started);
  }
  agent.destroy();
  times.sort((a, b) => a - b);
  const at = (q: number) => Number(times[Math.min(times.length - 1, Math.floor(q * times.length))]!.toFixed(2));
  return { requests, p50: at(0.5), p99: at(0.99), max: at(1) };
}
