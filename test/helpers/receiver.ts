import http from 'node:http';
import { AddressInfo } from 'node:net';

export interface Delivery {
  headers: http.IncomingHttpHeaders;
  body: string;
  /** When it arrived, and when and how it was answered (absent while unanswered). */
  receivedAt?: number;
  answered?: { status: number; at: number };
}

/** A local callback receiver: records every request and answers with the next scripted status. */
export class Receiver {
  readonly deliveries: Delivery[] = [];
  private server: http.Server | null = null;
  /**
   * Statuses to answer, in order; when empty, `fallback`. `'hang'` never answers; `{ status, delayMs }`
   * answers late; `'upgrade'` answers `101 Switching Protocols` to another protocol, and keeps the socket.
   */
  script: Array<number | 'hang' | 'upgrade' | { status: number; delayMs: number }> = [];
  fallback: number | 'hang' = 200;
  /** Decides the answer from what arrived, before `script` and `fallback` (undefined: leave it to them). */
  answerFor: ((delivery: Delivery) => number | 'hang' | undefined) | null = null;
  url = '';

  async start(port = 0, host = '127.0.0.1'): Promise<void> {
    this.server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const delivery: Delivery = { headers: req.headers, body, receivedAt: Date.now() };
        this.deliveries.push(delivery);
        const status = this.answerFor?.(delivery) ?? this.script.shift() ?? this.fallback;
        const answer = (code: number) => {
          delivery.answered = { status: code, at: Date.now() };
          res.writeHead(code).end();
        };
        if (typeof status === 'object') setTimeout(() => answer(status.status), status.delayMs);
        else if (status === 'upgrade') {
          delivery.answered = { status: 101, at: Date.now() };
          res.socket?.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: rollcall-test\r\nConnection: upgrade\r\n\r\n');
        } else if (status !== 'hang') answer(status);
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(port, host, resolve));
    this.url = `http://${host}:${(this.server.address() as AddressInfo).port}/hook`;
  }

  async waitFor(count: number, timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.deliveries.length < count) {
      if (Date.now() > deadline) throw new Error(`expected ${count} deliveries, got ${this.deliveries.length}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
