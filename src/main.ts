import { once } from 'node:events';
import { Server } from 'node:http';
import v8 from 'node:v8';

import { Config, ConfigError, loadConfig } from './config';
import { DatabaseEncodingError, NewerSchemaError, toError } from './domain/errors';
import { closeServer, createServer } from './http/server';
import { createRollcall } from './rollcall';

/** Starts the service: config checked at boot, migrations applied, SIGTERM/SIGINT drain and exit. */
export async function serve(): Promise<void> {
  const config = loadConfig();
  limitHeapGrowth(config.HEAP_GROWTH_PERCENT);
  const rollcall = await createRollcall(config);
  const { log } = rollcall;
  if (!config.tokens) {
    log.warn({ host: config.HOST }, 'API_TOKENS is not set: every request is allowed; keep HOST on a loopback address');
    if (config.CALLBACK_DNS_SERVERS.length > 0) log.warn('CALLBACK_DNS_SERVERS is set but applies only with API_TOKENS: callbacks use the system resolver');
    if (config.TENANT_RATE_LIMIT) log.warn('TENANT_RATE_LIMIT is set without API_TOKENS: every caller shares one budget, which any caller can use up');
  }
  const server: Server = createServer(rollcall.app, { requestTimeoutMs: config.REQUEST_TIMEOUT }).listen(config.PORT, config.HOST);
  await once(server, 'listening').catch((error: unknown) => Promise.reject(listenError(toError(error), config)));
  // Only once it listens: a HOST given as a name is looked up first, and a process that then exits
  // for it must not have claimed callback events meanwhile (an attempt never recorded is sent again).
  rollcall.startBackground();
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : config.PORT;
  log.info(
    { host: config.HOST, port, database: config.DATABASE_URL ? databaseKind(config.DATABASE_URL) : `sqlite:${config.SQLITE_PATH}` },
    'rollcall listening',
  );
  // Machine-readable line for scripts that start the service on port 0.
  if (process.env.ROLLCALL_ANNOUNCE_PORT === '1') process.stdout.write(`ROLLCALL_PORT=${port}\n`);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down: draining requests');
    const timer = setTimeout(() => {
      log.error('shutdown timed out; exiting');
      process.exit(1);
    }, config.SHUTDOWN_TIMEOUT_MS);
    timer.unref();
    // Half the time for bodies still arriving, so the rest of the drain can end within it.
    closeServer(server, { bodyGraceMs: config.SHUTDOWN_TIMEOUT_MS / 2 });
    rollcall.beginShutdown();
    await once(server, 'close').catch(() => undefined);
    await rollcall.close();
    log.info('stopped');
    process.exit(0);
  };
  process.once('SIGTERM', (s) => void stop(s));
  process.once('SIGINT', (s) => void stop(s));
}

/**
 * Between full collections V8 lets the old generation grow to up to 4× what was live after the
 * last one. Under a steady request load what fills that room is short-lived request garbage that
 * survived two young collections, not data: capping the growth at 2× (100 %) took the benchmark's
 * peak from ~197 to ~155 MiB for about 2 % more time in GC (docs/benchmarks.md).
 * V8 reads this flag whenever it sets the next limit, so setting it at boot takes effect. 0 keeps
 * V8's own adaptive factor.
 */
function limitHeapGrowth(percent: number): void {
  if (percent > 0) v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
}

/**
 * A listen that failed, as the setting to change: an address that does not resolve or is not this
 * host's is HOST's, a port taken or not allowed is PORT's. Anything else stays as it was.
 */
function listenError(error: Error, config: Pick<Config, 'HOST' | 'PORT'>): Error {
  const code = (error as NodeJS.ErrnoException).code ?? '';
  const cause = `${code}: ${error.message}`;
  if (['ENOTFOUND', 'EAI_AGAIN', 'EAI_NONAME', 'EADDRNOTAVAIL', 'EAFNOSUPPORT'].includes(code)) {
    return new ConfigError(`invalid configuration:\n  HOST: cannot listen on '${config.HOST}' (${cause})`);
  }
  if (['EADDRINUSE', 'EACCES'].includes(code))
    return new ConfigError(`invalid configuration:\n  PORT: cannot listen on port ${config.PORT} of '${config.HOST}' (${cause})`);
  return error;
}

/** Reports a failure to start (one the operator fixes, a config error, a newer schema or the database's encoding, by its message alone) and exits 1. */
export function exitOnStartFailure(caught: unknown): never {
  const error = toError(caught);
  const operatorsToFix = error instanceof ConfigError || error instanceof NewerSchemaError || error instanceof DatabaseEncodingError;
  process.stderr.write(operatorsToFix ? `${error.message}\n` : `rollcall failed to start: ${error.stack ?? error.message}\n`);
  process.exit(1);
}

if (require.main === module) serve().catch(exitOnStartFailure);

/** The kind of database a URL names (its scheme: mysql, postgres, …), without its credentials. */
function databaseKind(url: string): string {
  return url.slice(0, Math.max(0, url.indexOf(':')));
}
