import fs from 'node:fs';
import net from 'node:net';

import { z } from 'zod';

import { EXACT_TEXT_RULE, isExactText } from './contract/text';
import { MAX_GROUP_SIZE, MIN_GROUP_SIZE } from './contract/vocabulary';
import { invalidAllowEntry } from './domain/callbackTarget';

/**
 * A whole number as written in an environment variable: digits only. Not what `Number()` also
 * reads (a blank value as 0, so PORT=' ' listened on a random port; `1e3`, `0x10`).
 */
const int = (min: number, max: number) =>
  z.string().trim().regex(/^\d+$/, 'must be a whole number (digits only)').transform(Number).pipe(z.number().int().min(min).max(max));

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration such as `500ms`, `60s`, `15m`, `12h`, `7d` (a bare number is seconds), in milliseconds. */
export function parseDuration(text: string): number | null {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim());
  if (!match) return null;
  return Math.round(Number(match[1]) * (UNIT_MS[match[2] ?? 's'] ?? 1000));
}

/**
 * The longest wait Node's timers take (~24.8 days; PostgreSQL's lock_timeout too): a longer one
 * fires after 1 ms, so SWEEP_INTERVAL=30d swept without pause and DB_QUERY_TIMEOUT=25d timed every
 * statement out. Settings that are only compared with timestamps (ages, retention) may be longer.
 */
const TIMER_MAX_MS = 2 ** 31 - 1;

/**
 * The longest age or retention: 100 years. Each is added to or taken from a timestamp bound as a
 * BIGINT; past ~1e21 ms JavaScript writes the number with an exponent, which PostgreSQL refuses, so
 * a retention of 99999999999999d failed every sweep and a backoff cap that long every failed callback's record.
 */
const AGE_MAX_MS = 100 * 365 * 86_400_000;

/** `ms` in the largest unit it is a whole number of (86400000 → 1d). */
function inWholeUnits(ms: number): string {
  const units: Array<[string, number]> = [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ];
  const [unit, size] = units.find(([, size]) => ms % size === 0) ?? ['ms', 1];
  return `${ms / size}${unit}`;
}

const inMs = (minMs: number, maxMs: number) => (text: string, ctx: z.RefinementCtx) => {
  const ms = parseDuration(text);
  if (ms === null || ms < minMs || ms > maxMs) {
    const most = maxMs === TIMER_MAX_MS ? ' and at most 24 days' : maxMs === AGE_MAX_MS ? ' and at most 100 years' : ` and at most ${inWholeUnits(maxMs)}`;
    ctx.addIssue({ code: 'custom', message: `must be a duration such as 500ms, 60s, 15m, 12h or 7d (at least ${minMs} ms${most})` });
    return z.NEVER;
  }
  return ms;
};

/** A duration setting; `maxMs` AGE_MAX_MS for one that no timer waits (an age compared with timestamps). */
const duration = (fallback: string, minMs = 0, maxMs = TIMER_MAX_MS) => z.string().default(fallback).transform(inMs(minMs, maxMs));

/** A duration whose default depends on other settings (filled in by loadConfig). */
const durationOrUnset = (minMs = 0) => z.string().transform(inMs(minMs, TIMER_MAX_MS)).optional();

/** A comma-separated list (blank entries dropped), each entry checked by `invalid` (a message, or null when fine). */
const commaList = (invalid: (entry: string) => string | null) =>
  z
    .string()
    .default('')
    .transform((text) =>
      text
        .split(',')
        .map((entry) => entry.trim())
        .filter((entry) => entry !== ''),
    )
    .superRefine((entries, ctx) => {
      for (const entry of entries) {
        const problem = invalid(entry);
        if (problem) ctx.addIssue({ code: 'custom', message: problem });
      }
    });

/** An ALLOWED_HOSTS entry: a host name as a Host header names it, without a port. */
const invalidHostName = (entry: string): string | null =>
  /^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$/i.test(entry) && entry.length <= 253
    ? null
    : `ALLOWED_HOSTS: "${entry}" is not a host name (names only, no port, no scheme)`;

const DNS_SERVER_WITH_PORT = /^(?:\[(?<ipv6>[^\]]*)\]|(?<ipv4>[\d.]+)):(?<port>\d{1,5})$/;

/**
 * A CALLBACK_DNS_SERVERS entry: `ip`, `ipv4:port` or `[ipv6]:port`. Checked here, as Node's
 * setServers takes some wrong ones without a word (`1.2.3.4:65536` as port 53) and aborts the
 * whole process on port 0.
 */
function invalidDnsServer(entry: string): string | null {
  // A zone index (`fe80::1%eth0`) passes net.isIP, and the resolver drops it: every query would fail.
  if (entry.includes('%')) return `${entry}: a zone index (%…) is not taken; give a global or unique-local address`;
  if (net.isIP(entry) !== 0) return null;
  const parts = DNS_SERVER_WITH_PORT.exec(entry)?.groups;
  const address = parts?.ipv6 !== undefined ? net.isIPv6(parts.ipv6) : net.isIPv4(parts?.ipv4 ?? '');
  const port = Number(parts?.port);
  if (address && port >= 1 && port <= 65535) return null;
  return `${entry} is not an IP address, ipv4:port or [ipv6]:port (port 1–65,535)`;
}

const MIN_BODY_LIMIT_BYTES = 1024;

/** BODY_LIMIT in bytes, as body-parser reads it (units of 1,024). */
function bodyBytes(limit: string): number {
  const [, digits, unit] = /^(\d+)(b|kb|mb)$/i.exec(limit) ?? [];
  return Number(digits) * ({ b: 1, kb: 1024, mb: 1024 * 1024 } as Record<string, number>)[(unit ?? 'b').toLowerCase()]!;
}

/** Every setting of the service, from the environment, validated once at boot. */
export const configSchema = z.object({
  PORT: int(0, 65535).default(8080),
  HOST: z.string().min(1).default('127.0.0.1'),
  DATABASE_URL: z
    .string()
    .regex(/^(mysql2?|postgres|postgresql):\/\//, 'must be a mysql://, postgres:// or postgresql://user:pass@host:port/db URL (unset it for embedded SQLite)')
    .optional(),
  SQLITE_PATH: z.string().min(1).default('./data/rollcall.sqlite'),
  GROUP_SIZE: int(MIN_GROUP_SIZE, MAX_GROUP_SIZE)
    .refine((n) => n % 8 === 0, 'must be a multiple of 8')
    .default(8192),
  DB_POOL_SIZE: int(1, 500).default(10),
  DB_POOLER: z.enum(['none', 'transaction']).default('none'),
  BODY_LIMIT: z
    .string()
    .regex(/^\d+(b|kb|mb)$/i, 'must look like 512kb or 2mb')
    // Below a kilobyte even an open's or a one-ID ack's body is refused: the service would start and answer 413 to nearly every call.
    .refine((limit) => bodyBytes(limit) >= MIN_BODY_LIMIT_BYTES, `must be at least 1kb`)
    .default('2mb'),
  TX_RETRIES: int(0, 50).default(8),
  LOCK_TIMEOUT: duration('2s', 1),
  DB_QUERY_TIMEOUT: durationOrUnset(0),
  ACK_GROUP_COMMIT: z.enum(['on', 'off']).default('on'),
  ACK_GROUP_COMMIT_WINDOW_MS: int(0, 50).default(2),
  ACK_GROUP_COMMIT_MAX_IDS: int(1, 1_000_000).default(20_000),
  ACK_GROUP_COMMIT_CONCURRENCY: int(1, 64).default(4),
  ACK_QUEUE_MAX_IDS: int(10_000, 100_000_000).default(200_000),
  OPEN_BATCH_TTL: duration('7d', 1000, AGE_MAX_MS),
  COMPLETED_RETENTION: duration('7d', 0, AGE_MAX_MS),
  SWEEP_INTERVAL: duration('60s', 0),
  SWEEP_CHUNK: int(1, 100_000).default(1000),
  SWEEP_CHUNK_ROWS: int(1, 10_000_000).default(20_000),
  FAILURE_REASONS_PER_BATCH: int(0, 100_000).default(1000),
  CALLBACK_SECRET: z.string().min(16, 'must be at least 16 characters').optional(),
  CALLBACK_TIMEOUT: duration('10s', 100),
  CALLBACK_BACKOFF_BASE: duration('1s', 1, AGE_MAX_MS),
  CALLBACK_BACKOFF_CAP: duration('10m', 1, AGE_MAX_MS),
  CALLBACK_MAX_AGE: duration('3d', 1000, AGE_MAX_MS),
  CALLBACK_CONCURRENCY: int(1, 256).default(16),
  CALLBACK_POLL_INTERVAL: duration('1s', 10),
  CALLBACK_ALLOW_HOSTS: commaList(invalidAllowEntry),
  ALLOWED_HOSTS: commaList(invalidHostName),
  CALLBACK_DNS_SERVERS: commaList(invalidDnsServer),
  WAIT_POLL_INTERVAL: duration('250ms', 10),
  WAIT_MAX: int(1, 1_000_000).default(10_000),
  TENANT_MAX_BATCHES: int(0, 1_000_000_000).optional(),
  TENANT_MAX_ITEMS: int(0, Number.MAX_SAFE_INTEGER).optional(),
  TENANT_RATE_LIMIT: int(0, 1_000_000_000).optional(),
  // Whole seconds: the RateLimit headers and Retry-After count in seconds.
  TENANT_RATE_WINDOW: duration('1s', 1000, 86_400_000).refine((ms) => ms % 1000 === 0, 'must be whole seconds (1s, 30s, 1m)'),
  API_TOKENS: z.string().optional(),
  API_TOKENS_FILE: z.string().optional(),
  PUBLIC_METRICS: z.enum(['on', 'off']).default('on'),
  PUBLIC_OPENAPI: z.enum(['on', 'off']).default('on'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  SHUTDOWN_TIMEOUT_MS: int(1_000, 600_000).default(10_000),
  HEAP_GROWTH_PERCENT: int(0, 300).default(100),
  REQUEST_TIMEOUT: duration('30s', 1000, 600_000),
});

export const SCOPES = ['produce', 'consume', 'read', 'admin'] as const;
export type Scope = (typeof SCOPES)[number];

const tokensSchema = z
  .array(
    z.strictObject({
      // Sent as `Authorization: Bearer <token>`: whitespace ends it, a control character cannot be sent,
      // and a header is read as Latin-1 (the bytes a Node client sends for U+0080 to U+00FF), so a
      // character past U+00FF can never match.
      token: z
        .string()
        .min(16, 'a token must be at least 16 characters')
        .regex(/^[\x21-\x7e\xa1-\xff]+$/, 'a token is sent in a header: no spaces or control characters, nothing past U+00FF'),
      tenant: z.string().min(1).max(64).refine(isExactText, `a tenant ${EXACT_TEXT_RULE}`),
      scopes: z.array(z.enum(SCOPES)).min(1),
      /** Signs this tenant's callbacks instead of CALLBACK_SECRET. */
      callbackSecret: z.string().min(16, 'a callbackSecret must be at least 16 characters').optional(),
    }),
  )
  .min(1)
  .refine((list) => new Set(list.map((t) => t.token)).size === list.length, 'tokens must be distinct')
  .superRefine((list, context) => {
    // A tenant's callbacks are signed with one secret: of two, the later entry's won unsaid.
    const secrets = new Map<string, string>();
    const told = new Set<string>();
    for (const { tenant, callbackSecret } of list) {
      if (callbackSecret === undefined) continue;
      const other = secrets.get(tenant) ?? callbackSecret;
      secrets.set(tenant, other);
      if (other === callbackSecret || told.has(tenant)) continue;
      told.add(tenant);
      context.addIssue({ code: 'custom', message: `tenant '${tenant}' has two callbackSecrets: give every token of a tenant the same one` });
    }
  });

export type TokenEntry = z.infer<typeof tokensSchema>[number];

export type Config = Omit<z.infer<typeof configSchema>, 'DB_QUERY_TIMEOUT'> & {
  /** Milliseconds a statement may go unanswered; 0: no limit. */
  DB_QUERY_TIMEOUT: number;
  /** Parsed from API_TOKENS or API_TOKENS_FILE; null when the service runs without authentication. */
  tokens: TokenEntry[] | null;
};

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

function issuesOf(key: string, error: z.ZodError): string {
  return error.issues.map((issue) => `  ${[key, ...issue.path].join('.')}: ${issue.message}`).join('\n');
}

/** API_TOKENS (JSON) or API_TOKENS_FILE (a file holding the same JSON), never both. */
function loadTokens(settings: z.infer<typeof configSchema>): TokenEntry[] | null {
  if (settings.API_TOKENS && settings.API_TOKENS_FILE)
    throw new ConfigError('invalid configuration:\n  API_TOKENS: set API_TOKENS or API_TOKENS_FILE, not both');
  const key = settings.API_TOKENS ? 'API_TOKENS' : 'API_TOKENS_FILE';
  let text = settings.API_TOKENS;
  if (settings.API_TOKENS_FILE) {
    try {
      text = fs.readFileSync(settings.API_TOKENS_FILE, 'utf8');
    } catch (error) {
      throw new ConfigError(`invalid configuration:\n  API_TOKENS_FILE: cannot read ${settings.API_TOKENS_FILE} (${(error as Error).message})`);
    }
  }
  if (text === undefined) return null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ConfigError(`invalid configuration:\n  ${key}: is not valid JSON`);
  }
  const parsed = tokensSchema.safeParse(json);
  if (!parsed.success) throw new ConfigError(`invalid configuration:\n${issuesOf(key, parsed.error)}`);
  return parsed.data;
}

/** The longest a statement may wait for a lock: LOCK_TIMEOUT, in whole seconds as MySQL counts it. */
const longestLockWait = (lockTimeoutMs: number) => Math.ceil(lockTimeoutMs / 1000) * 1000;

/** DB_QUERY_TIMEOUT when unset: 30 s, and at least 10 s beyond the longest lock wait. */
const DEFAULT_QUERY_TIMEOUT_MS = 30_000;
const QUERY_TIME_BEYOND_LOCK_WAIT_MS = 10_000;

/**
 * DB_QUERY_TIMEOUT as set, or its default. A statement may wait LOCK_TIMEOUT for a lock and then
 * still run: a limit not above that would take a busy database for one that does not answer.
 */
function queryTimeoutOf(settings: z.infer<typeof configSchema>): number {
  const lockWait = longestLockWait(settings.LOCK_TIMEOUT);
  const timeout = settings.DB_QUERY_TIMEOUT ?? Math.min(TIMER_MAX_MS, Math.max(DEFAULT_QUERY_TIMEOUT_MS, lockWait + QUERY_TIME_BEYOND_LOCK_WAIT_MS));
  if (timeout !== 0 && timeout <= lockWait)
    throw new ConfigError(`invalid configuration:\n  DB_QUERY_TIMEOUT: must be longer than LOCK_TIMEOUT in whole seconds (${lockWait} ms), or 0 for no limit`);
  return timeout;
}

/**
 * DB_POOLER=transaction is for PostgreSQL behind a pooler that shares server sessions between
 * transactions (PgBouncer's `pool_mode = transaction`); MySQL/MariaDB poolers keep sessions apart
 * themselves (ProxySQL stops multiplexing a session that set a variable), and SQLite has no server.
 */
function checkPooler(settings: z.infer<typeof configSchema>): void {
  if (settings.DB_POOLER === 'transaction' && !/^postgres(ql)?:\/\//.test(settings.DATABASE_URL ?? ''))
    throw new ConfigError('invalid configuration:\n  DB_POOLER: transaction is for a PostgreSQL DATABASE_URL (postgres://…) reached through a pooler');
}

/**
 * Settings whose absence means something else than a value would: no authentication, the embedded
 * database, unsigned callbacks. Set but empty (`API_TOKENS: ${ROLLCALL_TOKENS}` in a compose file on
 * a host without that variable), such a setting is refused, not taken for unset: the service started
 * open to anyone, or each replica on a database of its own. Other settings left empty take their default.
 */
const MEANINGFUL_WHEN_UNSET = ['API_TOKENS', 'API_TOKENS_FILE', 'DATABASE_URL', 'CALLBACK_SECRET'] as const;

function refuseEmptyMeaningful(env: Record<string, string | undefined>): void {
  const empty = MEANINGFUL_WHEN_UNSET.filter((key) => env[key] !== undefined && env[key]!.trim() === '');
  if (empty.length > 0)
    throw new ConfigError(`invalid configuration:\n${empty.map((key) => `  ${key}: set but empty; unset it, or give it a value`).join('\n')}`);
}

/** Parses settings; an invalid value stops the process with a message naming the key. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  refuseEmptyMeaningful(env);
  const present = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value !== ''));
  const parsed = configSchema.safeParse(present);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `  ${issue.path.join('.')}: ${issue.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  checkPooler(parsed.data);
  return { ...parsed.data, DB_QUERY_TIMEOUT: queryTimeoutOf(parsed.data), tokens: loadTokens(parsed.data) };
}
