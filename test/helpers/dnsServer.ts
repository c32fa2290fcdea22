import dgram from 'node:dgram';
import net from 'node:net';

const TYPE_A = 1;
const TYPE_NAMES: Record<number, string> = { [TYPE_A]: 'A', 28: 'AAAA' };
const CLASS_IN = 1;
const NXDOMAIN = 3;

interface Question {
  /** Lower-case, without the final dot. */
  name: string;
  type: number;
  /** Where the question section ends in the query. */
  end: number;
}

/** The one question of a query (what resolvers send), or null for anything else. */
function questionOf(query: Buffer): Question | null {
  if (query.length < 12 || query.readUInt16BE(4) !== 1) return null;
  const labels: string[] = [];
  for (let offset = 12; offset < query.length;) {
    const length = query[offset] ?? 0;
    if (length === 0) {
      if (offset + 5 > query.length) return null;
      return { name: labels.join('.').toLowerCase(), type: query.readUInt16BE(offset + 1), end: offset + 5 };
    }
    if (length > 63) return null; // a compression pointer: no resolver puts one in a question
    labels.push(query.toString('latin1', offset + 1, offset + 1 + length));
    offset += 1 + length;
  }
  return null;
}

/** The answer to `query`: its id and question, then one A record (TTL 0: nothing cached), none, or NXDOMAIN. */
function answerTo(query: Buffer, question: Question, answer: { ipv4?: string; rcode?: number }): Buffer {
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2);
  header[2] = 0x84 | ((query[2] ?? 0) & 0x01); // a response, authoritative, recursion as desired
  header[3] = 0x80 | (answer.rcode ?? 0); // recursion available
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(answer.ipv4 ? 1 : 0, 6);
  if (!answer.ipv4) return Buffer.concat([header, query.subarray(12, question.end)]);
  const record = Buffer.alloc(16);
  record.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
  record.writeUInt16BE(TYPE_A, 2);
  record.writeUInt16BE(CLASS_IN, 4);
  record.writeUInt32BE(0, 6);
  record.writeUInt16BE(4, 10);
  answer.ipv4.split('.').forEach((byte, i) => record.writeUInt8(Number(byte), 12 + i));
  return Buffer.concat([header, query.subarray(12, question.end), record]);
}

const isUnder = (name: string, zone: string) => name === zone || name.endsWith(`.${zone}`);

/**
 * A tiny authoritative DNS server on UDP loopback: answers A for the names it holds (AAAA with no
 * records), NXDOMAIN for other names, and nothing at all, ever, for names under its silent zones
 * (name servers that never answer). Records every name it was asked about.
 */
export class DnsServer {
  /** Every question, in the order asked: `name type` (`hook.rollcall.test A`). */
  readonly asked: string[] = [];
  private readonly socket = dgram.createSocket('udp4');
  port = 0;

  constructor(
    private readonly records: Record<string, string>,
    private readonly silentZones: readonly string[] = [],
  ) {
    for (const address of Object.values(records)) if (!net.isIPv4(address)) throw new Error(`${address} is not an IPv4 address`);
    this.socket.on('message', (query, peer) => this.answer(query, peer));
  }

  /** The server as CALLBACK_DNS_SERVERS names it. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Names under `zone` asked about so far, each counted once. */
  namesAskedUnder(zone: string): string[] {
    return [...new Set(this.asked.map((question) => question.split(' ')[0]!).filter((name) => isUnder(name, zone)))];
  }

  /** Listens on 127.0.0.1 (a free port unless given one). */
  async start(port = 0): Promise<void> {
    await new Promise<void>((resolve) => this.socket.bind(port, '127.0.0.1', resolve));
    this.port = this.socket.address().port;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.socket.close(resolve));
  }

  private answer(query: Buffer, peer: dgram.RemoteInfo): void {
    const question = questionOf(query);
    if (!question) return;
    this.asked.push(`${question.name} ${TYPE_NAMES[question.type] ?? question.type}`);
    if (this.silentZones.some((zone) => isUnder(question.name, zone))) return;
    const ipv4 = this.records[question.name];
    const answer = ipv4 === undefined ? { rcode: NXDOMAIN } : question.type === TYPE_A ? { ipv4 } : {};
    this.socket.send(answerTo(query, question, answer), peer.port, peer.address);
  }
}
