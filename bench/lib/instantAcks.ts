/**
 * An ack endpoint that commits nothing, in a process of its own (`node --import tsx`): it answers
 * every `POST /v1/acks` at once as if each ID were acked, and forwards every other request (open,
 * add, seal, item look-ups) to the rollcall service at INSTANT_ACKS_TARGET. It prints
 * ROLLCALL_PORT=<port> once listening. The BullMQ benchmark runs rollcallProcessor against it: the
 * worker then does all of the integration's work (coalescing, HTTP calls, waiting for answers) while
 * no service or database spends the machine's CPU on the acks — the integration's own cost.
 */
import http from 'node:http';

const target = new URL(process.env.INSTANT_ACKS_TARGET as string);
const agent = new http.Agent({ keepAlive: true });

function answerAck(req: http.IncomingMessage, res: http.ServerResponse): void {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const { ids } = JSON.parse(Buffer.concat(chunks).toString()) as { ids: string[] };
    const body = JSON.stringify({ acked: ids.length, duplicates: 0, rejected: [], completed: [] });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
}

function forward(req: http.IncomingMessage, res: http.ServerResponse): void {
  const upstream = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers, agent }, (answer) => {
    res.writeHead(answer.statusCode ?? 502, answer.headers);
    answer.pipe(res);
  });
  upstream.on('error', () => res.destroy());
  req.pipe(upstream);
}

const server = http.createServer((req, res) => (req.method === 'POST' && req.url === '/v1/acks' ? answerAck(req, res) : forward(req, res)));
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`ROLLCALL_PORT=${typeof address === 'object' && address ? address.port : 0}\n`);
});
process.on('SIGTERM', () => process.exit(0)); // nothing to finish: it keeps no state
