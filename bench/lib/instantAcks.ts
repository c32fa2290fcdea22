/**
 * An ack endpoint that commits nothing, in a process of its own (`node --import tsx`): it answers
 * every `POST /v1/acks` at once as if each ID were acked, and forwards every other request (open,
 * add, seal, item look-ups) to the rollcall service at INSTANT_ACKS_TARGET. It prints
 * ROLLCALL_PORT=<port> once listening. The BullMQ benchmark runs rollcallProcessor against it: the
 * worker then does all of the integration's work (coalescing, HTTP calls, waiting for answers) while
 * no ack waits for a commit and no service or database spends the machine's CPU on it.
 * BENCH_E2E_INSTANT_DELAY_MS (default 0) holds each ack's answer that long, spending no CPU: a
 * commit's wait without its work, to tell the two apart.
 */
import http from 'node:http';

const target = new URL(process.env.INSTANT_ACKS_TARGET as string);
const agent = new http.Agent({ keepAlive: true });
const delayMs = Number(process.env.BENCH_E2E_INSTANT_DELAY_MS ?? 0);
/** Headers of one hop, not to be passed on by a proxy (RFC 9110, 7.6.1). */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade']);

function passable(headers: http.IncomingHttpHeaders): http.OutgoingHttpHeaders {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !HOP_BY_HOP.has(name)));
}

function answer(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function answerAck(req: http.IncomingMessage, res: http.ServerResponse): void {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('error', () => res.destroy());
  req.on('end', () => {
    let ids: unknown;
    try {
      ids = (JSON.parse(Buffer.concat(chunks).toString()) as { ids?: unknown }).ids;
    } catch {
      ids = undefined;
    }
    if (!Array.isArray(ids)) return answer(res, 400, { error: { code: 'invalid_request', message: 'the instant endpoint takes { "ids": [...] }' } });
    const acked = { acked: ids.length, duplicates: 0, rejected: [], completed: [] };
    if (delayMs > 0) setTimeout(() => answer(res, 200, acked), delayMs);
    else answer(res, 200, acked);
  });
}

function forward(req: http.IncomingMessage, res: http.ServerResponse): void {
  const upstream = http.request(
    { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: passable(req.headers), agent },
    (reply) => {
      res.writeHead(reply.statusCode ?? 502, passable(reply.headers));
      reply.pipe(res);
    },
  );
  upstream.on('error', (error) => {
    process.stderr.write(`instantAcks: ${req.method} ${req.url} to the service failed: ${error.message}\n`);
    res.destroy();
  });
  res.on('close', () => res.writableFinished || upstream.destroy()); // the client left before the answer
  req.pipe(upstream);
}

const server = http.createServer((req, res) => (req.method === 'POST' && req.url === '/v1/acks' ? answerAck(req, res) : forward(req, res)));
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`ROLLCALL_PORT=${typeof address === 'object' && address ? address.port : 0}\n`);
});
process.on('SIGTERM', () => process.exit(0)); // nothing to finish: it keeps no state
