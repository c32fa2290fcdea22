// A callback receiver that verifies rollcall's Standard Webhooks signature and dedupes by event id.
// Run: CALLBACK_SECRET=... node docs/examples/receiver.mjs  (listens on 127.0.0.1:9000, or PORT)
import { createHmac, timingSafeEqual } from 'node:crypto';
import http from 'node:http';

const secret = process.env.CALLBACK_SECRET;
const TOLERANCE_SECONDS = 5 * 60; // a request signed longer ago (or ahead) is refused: a replay
// rollcall retries an event, under the same id, until CALLBACK_MAX_AGE (3 days by default) after
// its first attempt, its last try possibly late (a backlog, an outage): keep an id well past that
// since it was last seen. An id dropped after rollcall's last try can only come back as a replay
// of an old request, which its timestamp gives away.
const KEEP_IDS_MS = 7 * 24 * 3600 * 1000;
const seen = new Map(); // event id → when seen; in production: a table with a unique key on the id

// webhook-signature: `v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<raw body>">`.
function signatureMatches(rawBody, headers) {
  if (!secret) return true; // rollcall signs only when it has a secret
  const id = headers['webhook-id'];
  const timestamp = headers['webhook-timestamp'];
  const signatures = headers['webhook-signature'];
  if (typeof id !== 'string' || typeof timestamp !== 'string' || typeof signatures !== 'string') return false;
  const sentAt = Number(timestamp);
  if (!Number.isFinite(sentAt) || Math.abs(Date.now() / 1000 - sentAt) > TOLERANCE_SECONDS) return false;
  const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), rawBody]);
  const expected = Buffer.from(`v1,${createHmac('sha256', secret).update(signed).digest('base64')}`);
  // Space-separated: a sender may sign with more than one secret (rollcall sends one). Lengths are
  // compared as bytes: timingSafeEqual throws on buffers of different lengths.
  return signatures.split(' ').some((text) => {
    const given = Buffer.from(text);
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}

setInterval(() => {
  for (const [id, at] of seen) if (Date.now() - at > KEEP_IDS_MS) seen.delete(id);
}, 60_000).unref();

http
  .createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks); // verify the raw bytes, before any JSON parsing
      if (!signatureMatches(raw, req.headers)) return res.writeHead(401).end();
      const eventId = req.headers['webhook-id'];
      const repeat = seen.has(eventId);
      seen.set(eventId, Date.now()); // kept from its latest sighting
      if (!repeat) {
        const { event, batch } = JSON.parse(raw.toString('utf8'));
        console.log(event, batch.id, batch.outcome, `${batch.succeeded}/${batch.total} succeeded`);
      }
      res.writeHead(204).end(); // any 2xx stops the retries; answer 2xx for duplicates too
    });
  })
  .listen(Number(process.env.PORT ?? 9000), '127.0.0.1');
