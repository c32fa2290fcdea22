import type { RequestHandler } from 'express';
import type { Metrics } from '../metrics';

/** Counts and times every request by its route pattern (not its URL, so ids do not explode labels). */
export function httpMetrics(metrics: Metrics): RequestHandler {
  return (req, res, next) => {
    const stop = metrics.httpDuration.startTimer();
    res.on('finish', () => {
      const route = req.route ? `${req.baseUrl}${String(req.route.path)}` : 'unmatched';
      const labels = { method: req.method, route, status: String(res.statusCode) };
      stop(labels);
      metrics.httpRequests.inc(labels);
    });
    next();
  };
}
