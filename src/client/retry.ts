import { RollcallApiError } from './apiError';
import { ANSWER_TOO_LARGE } from './httpSend';

/**
 * Tries, waiting 50 ms, 100 ms, … (capped at 2 s) between them, or as long as an answer's
 * `Retry-After` asks when that is longer (up to MAX_RETRY_AFTER_MS), each pause lengthened at random
 * by up to half (JITTER). The default waits 29–44 s in all, plus each try's own time (up to the
 * client's `timeoutMs` when the service does not answer): long enough to ride out a restart of the
 * service, so a producer's adds or a wait are not given up in a deploy. (The integrations' acks go
 * on longer: `retryForMs` in ackCoalescer.ts.)
 */
export interface RetryPolicy {
  attempts: number;
  firstDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 20, firstDelayMs: 50 };

/**
 * The policy `given` asks for, what it leaves out (or sets `undefined`) taken from `defaults`. A
 * value no policy means is refused at once: `attempts: NaN` compared false with every try, and a
 * worker's acks against a service that was down were then sent again for good.
 */
export function retryPolicyOf(given?: Partial<RetryPolicy> | null, defaults: RetryPolicy = DEFAULT_RETRY): RetryPolicy {
  const attempts = given?.attempts ?? defaults.attempts;
  const firstDelayMs = given?.firstDelayMs ?? defaults.firstDelayMs;
  if (!(attempts === Infinity || (Number.isSafeInteger(attempts) && attempts >= 1)))
    throw new RangeError(`retry.attempts must be a whole number ≥ 1 (or Infinity), not ${String(attempts)}`);
  if (!(Number.isFinite(firstDelayMs) && firstDelayMs >= 0))
    throw new RangeError(`retry.firstDelayMs must be a number of milliseconds ≥ 0, not ${String(firstDelayMs)}`);
  return { attempts, firstDelayMs };
}

/** The longest backoff between two tries (before JITTER); an answer's `Retry-After` may ask for more, up to MAX_RETRY_AFTER_MS. */
const MAX_DELAY_MS = 2000;
const MAX_RETRY_AFTER_MS = 30_000;

/**
 * Node's refusals of a request it cannot even send: a header with a line break (a token read from a
 * file with its newline), a URL without http(s), a malformed URL. A setting to fix, not an outage.
 */
const UNSENDABLE = new Set([
  'ERR_INVALID_CHAR',
  'ERR_INVALID_HTTP_TOKEN',
  'ERR_HTTP_INVALID_HEADER_VALUE',
  'ERR_INVALID_URL',
  'ERR_INVALID_PROTOCOL',
  'ERR_UNESCAPED_CHARACTERS',
]);

/**
 * TLS refusals of the service's certificate (self-signed, expired, another host's name, an untrusted
 * chain) and an https URL naming a plain-http port: a setting or a certificate to fix. Sending again
 * only makes each job wait out the retries (and an AMQP message, nacked as for an outage, return
 * again and again).
 */
const UNTRUSTED = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_SIGNATURE_FAILURE',
  'CERT_REVOKED',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'INVALID_CA',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'ERR_SSL_WRONG_VERSION_NUMBER',
]);

/**
 * fetch's refusal of a URL with a user name or password in it (`http://user:secret@host`): a
 * TypeError without a code, told by its message. Sent again it is refused again.
 */
const CREDENTIALS_IN_URL = /URL that includes credentials/;

/** Whether `error` or one of its causes (fetch wraps them) is a request Node would not send, a service it cannot trust, or an answer no service of ours gives. */
function unsendable(error: unknown): boolean {
  for (let at = error, depth = 0; typeof at === 'object' && at !== null && depth < 4; at = (at as { cause?: unknown }).cause, depth++) {
    const code = (at as { code?: unknown }).code;
    if (typeof code === 'string' && (UNSENDABLE.has(code) || UNTRUSTED.has(code) || code === ANSWER_TOO_LARGE)) return true;
    // By name: fetch's TypeError may be of another realm than this module's (Jest's, a vm's).
    const { name, message } = at as { name?: unknown; message?: unknown };
    if (name === 'TypeError' && typeof message === 'string' && CREDENTIALS_IN_URL.test(message)) return true;
  }
  return false;
}

/**
 * Whether a failed call may succeed when sent again: a network error or time-out, `408` (a proxy or
 * server that gave up waiting for the request), `429`, or a `5xx` (`503` is what the service answers
 * while its database is away). Another `4xx` answer will not change, nor will a request Node refuses
 * to send or a certificate it refuses (each job's ack waited out ~29 s of retries for them).
 */
export function isTransient(error: unknown): boolean {
  if (error instanceof RollcallApiError) return error.status === 408 || error.status === 429 || error.status >= 500;
  return !unsendable(error);
}

/**
 * Whether a request ended at its own time limit (the client reports its own as an `AbortError`,
 * however the request was sent; a `fetch` of the caller's may throw a `TimeoutError` of its own)
 * rather than with an answer or a network error.
 */
export function isTimeLimit(error: unknown): boolean {
  const name = (error as { name?: unknown } | null)?.name;
  return name === 'AbortError' || name === 'TimeoutError';
}

/**
 * The most a pause is lengthened at random, as a share of itself. Workers held through one outage
 * (or told by one full ack queue to come back in a second) would otherwise all come back within the
 * same millisecond, to be refused together again. Only ever longer: a `Retry-After` is the least to
 * wait.
 */
const JITTER = 0.5;

/** How long to wait after the `attempt`-th try failed with `error`. */
export function retryDelayMs(policy: RetryPolicy, attempt: number, error: unknown): number {
  const backoff = Math.min(MAX_DELAY_MS, policy.firstDelayMs * 2 ** (attempt - 1));
  const asked = error instanceof RollcallApiError ? (error.retryAfterMs ?? 0) : 0;
  return Math.max(backoff, Math.min(asked, MAX_RETRY_AFTER_MS)) * (1 + JITTER * Math.random());
}

/** When `withRetries` stops, and whom it tells of a failure it will try again after. */
export interface RetryLimits {
  /** No try starts after this `performance.now()` time (monotonic: a wall-clock step neither ends nor stretches the tries): a wait that would pass it ends there, with a last try. Default none. */
  until?: number;
  /** Told of each transient failure that another try follows. */
  onRetry?: (error: unknown) => void;
  /** Which failures are tried again (default isTransient): a call that is not idempotent narrows it to those that made nothing. */
  retryable?: (error: unknown) => boolean;
  /**
   * Whether the pauses between tries keep the process alive (default true). False: a process with
   * nothing else to do ends during a pause, its call given up: for the integrations' acks, whose jobs
   * and messages then run again; a caller whose call must not be given up so holds the process
   * itself (`keepingProcessAlive`: the failure watch's acks, a drain).
   */
  keepsProcessAlive?: boolean;
}

/**
 * Runs `call` until it succeeds, the error is not transient, the attempts are spent, or `until` has
 * come. Only for calls that are safe to repeat: acks (a repeat is a duplicate) and adds with an
 * Idempotency-Key.
 */
export async function withRetries<T>(call: () => Promise<T>, policy: RetryPolicy = DEFAULT_RETRY, limits: RetryLimits = {}): Promise<T> {
  const until = limits.until ?? Infinity;
  // Set once a wait was cut to end at `until`: that try is the last, whatever the clock says after
  // it (a timer may fire a millisecond early by the clock).
  let last = false;
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      const leftMs = until - performance.now();
      if (last || attempt >= policy.attempts || !(limits.retryable ?? isTransient)(error) || leftMs <= 0) throw error;
      limits.onRetry?.(error);
      const backoffMs = retryDelayMs(policy, attempt, error);
      last = backoffMs >= leftMs;
      await new Promise((resolve) => {
        const pause = setTimeout(resolve, Math.min(backoffMs, leftMs));
        if (limits.keepsProcessAlive === false) pause.unref();
      });
    }
  }
}
