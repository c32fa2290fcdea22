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
  /** Open connections, each as its two sockets, and those `freeze()` stopped. */
  private readonly pairs = new Set<[net.Socket, net.Socket]>();
  private readonly frozen = new Set<[net.Socket, net.Socket]>();
  /** While set, the database's answers are held and a client's close does not reach it (`holdAnswers()`). */
  private holding = false;
  /** Set by `freezeConnectionSending()`: what to look for in what clients send, whom to tell, and whether it stays set. */
  private tripwire: { text: Buffer; tripped: (thaw: () => Promise<void>) => void; every: boolean } | null = null;

  /** Set by `countSending()`: what to look for in what clients send, and in how many of their writes it was seen. */
  private readonly counters = new Set<{ text: Buffer; seen: number }>();

  /** From now on, counts the writes of clients that carry `text` (a statement, or a value bound to one) until `stop()`. */
  countSending(text: string): { seen(): number; stop(): void } {
    const counter = { text: Buffer.from(text), seen: 0 };
    this.counters.add(counter);
    return { seen: () => counter.seen, stop: () => void this.counters.delete(counter) };
  }

  /** Set by `countReceived()`: bytes the database sent clients since. */
  private readonly receivers = new Set<{ bytes: number }>();

  /** From now on, counts the bytes the database sends to clients until `stop()`. */
  countReceived(): { bytes(): number; stop(): void } {
    const receiver = { bytes: 0 };
    this.receivers.add(receiver);
    return { bytes: () => receiver.bytes, stop: () => void this.receivers.delete(receiver) };
  }

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
      const pair: [net.Socket, net.Socket] = [client, upstream];
      this.pairs.add(pair);
      // A client's end reaches the database through the close handler below, not through the pipe: a
      // held connection's must not reach it at all.
      client.pipe(upstream, { end: false }).pipe(client);
      // After the pipe's own listener: what tripped the wire has reached the database.
      client.on('data', (chunk: Buffer) => {
        for (const counter of this.counters) if (chunk.includes(counter.text)) counter.seen += 1;
        const wire = this.tripwire;
        if (!wire || !chunk.includes(wire.text)) return;
        if (!wire.every) this.tripwire = null;
        this.freezePair(pair);
        wire.tripped(() => this.thawPair(pair));
      });
      upstream.on('data', (chunk: Buffer) => {
        for (const receiver of this.receivers) receiver.bytes += chunk.length;
      });
      client.on('close', () => this.holding || upstream.destroy());
      upstream.on('close', () => {
        client.destroy();
        this.pairs.delete(pair);
        this.frozen.delete(pair);
      });
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.port = (server.address() as net.AddressInfo).port;
    this.server = server;
  }

  /**
   * What clients send still reaches the database, but its answers are held, and a client that closes
   * its connection leaves the database's side open: a network that fails while the database works
   * on, as a partition looks from the database's side (it never hears the client go).
   */
  holdAnswers(): void {
    this.holding = true;
    this.silent = true;
    for (const [client, upstream] of this.pairs) {
      upstream.unpipe(client);
      upstream.pause();
    }
  }

  /** How many connections are open through the proxy. */
  get connections(): number {
    return this.pairs.size;
  }

  /** Drops every connection; new ones are taken and never answered (until `speak()`). */
  silence(): void {
    this.silent = true;
    for (const s of this.sockets) s.destroy();
  }

  /**
   * Open connections stay open but carry nothing either way (what is sent to them waits), and new
   * ones are taken and never answered: a database host that froze (a network cut, a paused VM).
   */
  freeze(): void {
    this.silent = true;
    for (const pair of this.pairs) this.freezePair(pair);
  }

  /**
   * The first connection that sends `text` from now on freezes as `freeze()` freezes them all: that
   * statement reaches the database, but its answer, and anything after, waits (until `speak()`).
   * Every other connection, and new ones, carry on: one connection whose host stopped answering (a
   * half-open TCP connection) while the pool's others work. Resolves once it has frozen, with a
   * function that lets that one connection carry on (`speak()` lets them all), resolving once the
   * database's held answer has been passed on.
   */
  freezeConnectionSending(text: string): Promise<() => Promise<void>> {
    return new Promise((tripped) => (this.tripwire = { text: Buffer.from(text), tripped, every: false }));
  }

  /**
   * As `freezeConnectionSending()`, for every connection that sends `text` (until `speak()`): a
   * statement that hangs wherever it runs, as one waiting on a lock does. Resolves at the first.
   */
  freezeEveryConnectionSending(text: string): Promise<void> {
    return new Promise((tripped) => (this.tripwire = { text: Buffer.from(text), tripped: () => tripped(), every: true }));
  }

  private freezePair(pair: [net.Socket, net.Socket]): void {
    const [client, upstream] = pair;
    client.unpipe(upstream);
    upstream.unpipe(client);
    client.pause();
    upstream.pause();
    this.frozen.add(pair);
  }

  /** New connections reach the database again, and connections `freeze()` stopped carry on. */
  speak(): void {
    this.silent = false;
    if (this.tripwire?.every) this.tripwire = null;
    for (const pair of this.frozen) void this.thawPair(pair);
  }

  /** Lets a frozen connection carry on; resolves once the database's next bytes reached the client. */
  private thawPair(pair: [net.Socket, net.Socket]): Promise<void> {
    if (!this.frozen.delete(pair)) return Promise.resolve();
    const [client, upstream] = pair;
    const passedOn = new Promise<void>((resolve) => upstream.once('data', () => setImmediate(resolve)));
    client.pipe(upstream, { end: false }).pipe(client);
    return passedOn;
  }

  /**
   * Drops the connections frozen now: what they sent reached the database, and its answers never
   * arrive (a connection lost after its last statement was sent, or an answer lost on its way).
   */
  dropFrozen(): void {
    for (const pair of this.frozen) {
      this.frozen.delete(pair);
      for (const socket of pair) socket.destroy();
    }
  }

  /** Drops every connection and stops accepting new ones: the database "goes away". */
  async cut(): Promise<void> {
    this.holding = false;
    for (const s of this.sockets) s.destroy();
    const server = this.server;
    this.server = null;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
