import type { ServerResponse } from 'node:http';

import type { RequestHandler } from 'express';

import type { Metrics } from '../metrics';

interface RouteSeries {
  observe(seconds: number): void;
}

/** The status a request is counted under when its client left before the answer was sent (nginx's). */
const CLIENT_LEFT = '499';

/** Answers this service cut short itself, with the status each is counted under: not a client that left. */
const cutByServer = new WeakMap<ServerResponse, string>();

/**
 * Notes that the service itself cuts `res` short (an answer that failed mid-send, a drain's cut):
 * it is counted under `status`, or under the status its answer began with.
 */
export function countAsCutByServer(res: ServerResponse, status = String(res.statusCode)): void {
  cutByServer.set(res, status);
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
    // On `close`, not `finish`: an answer written to a socket the client had already closed never
    // finishes, so a wait given up, or an ack whose client timed out during a slow database, went
    // uncounted, in the very incidents the 503 rate and the p99 are watched for.
    res.on('close', () => {
      const route = req.route ? `${req.baseUrl}${String(req.route.path)}` : 'unmatched';
      const status = res.writableFinished ? String(res.statusCode) : (cutByServer.get(res) ?? CLIENT_LEFT);
      seriesFor(req.method, route, status).observe((performance.now() - started) / 1000);
    });
    next();
  };
}
