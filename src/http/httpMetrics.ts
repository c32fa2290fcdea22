import type { RequestHandler } from 'express';

import type { Metrics } from '../metrics';

interface RouteSeries {
  observe(seconds: number): void;
}

/**
 * Counts and times every request by its route pattern (not its URL, so ids do not explode labels).
 * The labelled series are looked up once per method/route/status and kept: prom-client would
 * otherwise hash the label object on every request (~10 % of a one-ID ack's cost).
 */
export function httpMetrics(metrics: Metrics): RequestHandler {
  const series = new Map<string, RouteSeries>();
  const seriesFor = (method: string, route: string, status: string): RouteSeries => {
    const key = `${method} ${route} ${status}`;
    let found = series.get(key);
    if (!found) {
      const duration = metrics.httpDuration.labels(method, route, status);
      const count = metrics.httpRequests.labels(method, route, status);
      found = {
        observe(seconds) {
          duration.observe(seconds);
          count.inc();
        },
      };
      series.set(key, found);
    }
    return found;
  };
  return (req, res, next) => {
    const started = performance.now();
    res.on('finish', () => {
      const route = req.route ? `${req.baseUrl}${String(req.route.path)}` : 'unmatched';
      seriesFor(req.method, route, String(res.statusCode)).observe((performance.now() - started) / 1000);
    });
    next();
  };
}
