// A callback receiver that verifies rollcall's signature and dedupes by event id.
// Run: CALLBACK_SECRET=... node docs/examples/receiver.mjs  (listens on 127.0.0.1:9000, or PORT)
import { createHmac, timingSafeEqual } from 'node:crypto';
import http from 'node:http';

const secret = process.env.CALLBACK_SECRET;
const seen = new Set(); // in production: a table with a unique key on the event id

function signatureMatches(rawBody, header) {
  if (!secret) return true; // rollcall signs only when it has a secret
  if (typeof header !== 'string') return false;
  const expected = Buffer.from(`sha256=${createHmac('sha256', secret).update(rawBody).digest('hex')}`);
  const given = Buffer.from(header);
  return expected.length === given.length && timingSafeEqual(expected, given);
}

http
  .createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks); // verify the raw bytes, before any JSON parsing
      if (!signatureMatches(raw, req.headers['x-rollcall-signature'])) return res.writeHead(401).end();
      const eventId = req.headers['x-rollcall-event-id'];
      if (!seen.has(eventId)) {
        seen.add(eventId);
        const { event, batch } = JSON.parse(raw.toString('utf8'));
        console.log(event, batch.id, batch.outcome, `${batch.succeeded}/${batch.total} succeeded`);
      }
      res.writeHead(204).end(); // any 2xx stops the retries; answer 2xx for duplicates too
    });
  })
  .listen(Number(process.env.PORT ?? 9000), '127.0.0.1');
