import net from 'node:net';

/** A TCP proxy to a real server that a test can cut (refuse and drop connections) and restore. */
export class TcpProxy {
  private server: net.Server | null = null;
  private sockets = new Set<net.Socket>();
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  /** While set, new connections are taken but never answered: a database host that hangs. */
  private silent = false;

  async open(): Promise<void> {
    const server = net.createServer((client) => {
      if (this.silent) {
        this.sockets.add(client);
        client.on('close', () => this.sockets.delete(client));
        return void client.on('error', () => client.destroy());
      }
      const upstream = net.connect(this.targetPort, this.targetHost);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => s.destroy());
      }
      client.pipe(upstream).pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.port = (server.address() as net.AddressInfo).port;
    this.server = server;
  }

  /** Drops every connection; new ones are taken and never answered (until `speak()`). */
  silence(): void {
    this.silent = true;
    for (const s of this.sockets) s.destroy();
  }

  /** New connections reach the database again. */
  speak(): void {
    this.silent = false;
  }

  /** Drops every connection and stops accepting new ones: the database "goes away". */
  async cut(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    const server = this.server;
    this.server = null;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
