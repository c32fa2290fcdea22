import fs from 'node:fs';
import net from 'node:net';

/** Lowest port handed out by chance: below it are the well-known and registered ports the machine's services use. */
const LOWEST = 10_000;
const ATTEMPTS = 1000;

/** The kernel's range for ports it picks itself (for port 0 and for outgoing connections). */
function ephemeralRange(): [number, number] {
  try {
    const [low, high] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (low && high) return [low, high];
  } catch {
    /* not Linux: Linux's default */
  }
  return [32_768, 60_999];
}

function bound(port: number): Promise<net.Server | null> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(null));
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

/**
 * `count` distinct ports free on 127.0.0.1, for servers a test starts itself (a private MariaDB or
 * PostgreSQL, Galera nodes), all held open until every one is picked so none comes back twice.
 *
 * They are drawn below the kernel's ephemeral range, not taken from port 0: a port the kernel picks
 * for port 0 it also picks for outgoing connections, and in the seconds between our closing it and
 * the server binding it (a Galera joiner binds its SST port only once it has joined; a restarted
 * private server binds its old port again) one of the many connections a parallel test run opens
 * could take it. That is the likeliest reason a Galera joiner's rsync daemon exited before listening
 * in both attempts of one CI run (its log was gone, so not shown).
 */
export async function freePorts(count: number): Promise<number[]> {
  const [low] = ephemeralRange();
  const servers: net.Server[] = [];
  try {
    for (let attempt = 0; servers.length < count; attempt++) {
      if (attempt === ATTEMPTS) throw new Error(`no ${count} free ports between ${LOWEST} and ${low}`);
      const port = low > LOWEST ? LOWEST + Math.floor(Math.random() * (low - LOWEST)) : 0;
      const server = await bound(port);
      if (server) servers.push(server);
    }
    return servers.map((server) => (server.address() as net.AddressInfo).port);
  } finally {
    await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  }
}

/** Whether something accepts connections on 127.0.0.1:`port`. */
export function accepting(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}
