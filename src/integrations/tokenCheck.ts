import { RollcallApiError, RollcallClient } from '../client';
import { RollcallIntegrationError, warn } from './errors';

/** How often a refused token is asked about again (a service fixed, a token added), and how long a job waits for that. */
export const TOKEN_RECHECK_MS = 5_000;
/** Warnings of a refused token, at most one this often. */
const WARN_EVERY_MS = 60_000;

/**
 * Whether rollcall refused the client's token itself: `401` (no such token) or `403` (a scope it
 * lacks). Not another tenant's token, which rollcall takes and whose acks it rejects item by item.
 */
export function refusesToken(error: unknown): boolean {
  return error instanceof RollcallApiError && (error.status === 401 || error.status === 403);
}

/**
 * Whether rollcall refuses this client's token. An ack refused with `401` or `403` makes it
 * suspect; `GET /v1/whoami` then decides (a `401`, or a token without the `consume` scope, is a
 * refusal), at once and then TOKEN_RECHECK_MS after each answer while it is refused. While it is,
 * no job or message runs (BullMQ jobs are put back, AMQP messages held): its work would be done,
 * and done again at every retry, with no ack rollcall would take (a wrong token, a service
 * deployed without the workers' tokens). Only the look-up's answer puts jobs back, not the ack's:
 * one replica of several, or a proxy, that answered `401` once must not stop a worker that the
 * others serve. Anything but a refusal (rollcall out of reach, a 5xx, no
 * answer in TOKEN_RECHECK_MS) counts as taken: an outage is the acks' own retries' to meet.
 */
export class TokenCheck {
  /** True from a refused ack until rollcall takes the token again: read on every job, so a field. */
  suspect = false;
  private checkedAt = -Infinity;
  private next: Promise<RollcallIntegrationError | null> | null = null;
  private warnedAt = -Infinity;

  constructor(private readonly client: RollcallClient) {}

  /** Learns from an ack's answer: a `401` or `403` makes the token suspect (see `verdict`). */
  learn(error: unknown): void {
    if (refusesToken(error)) this.suspect = true;
  }

  /**
   * For a job that comes while the token is suspect: rollcall's answer at the next look-up, which
   * is at once after a refused ack and then TOKEN_RECHECK_MS after the answer before, while
   * refused. The jobs (messages) that come meanwhile wait for that one answer (a Worker keeps their
   * locks), so a Worker whose token stays refused puts back at most its concurrency in jobs every
   * TOKEN_RECHECK_MS.
   */
  verdict(): Promise<RollcallIntegrationError | null> {
    if (!this.suspect) return Promise.resolve(null);
    this.next ??= this.lookUpAfter(Math.max(0, this.checkedAt + TOKEN_RECHECK_MS - performance.now()));
    return this.next;
  }

  private async lookUpAfter(delayMs: number): Promise<RollcallIntegrationError | null> {
    try {
      if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs).unref());
      const refusal = await this.lookUp();
      if (refusal === null) {
        this.suspect = false;
        this.checkedAt = -Infinity; // a refusal learnt later is looked up at once
      } else {
        this.checkedAt = performance.now();
        this.warnOf(refusal);
      }
      return refusal;
    } finally {
      this.next = null;
    }
  }

  /** The refusal rollcall answers now, or null (taken, or no answer that says otherwise in time). */
  private async lookUp(): Promise<RollcallIntegrationError | null> {
    let timer: NodeJS.Timeout | undefined;
    const noAnswer = new Promise<null>((resolve) => (timer = setTimeout(resolve, TOKEN_RECHECK_MS, null).unref()));
    const answer = this.client.whoami().then(
      ({ tenant, scopes }) =>
        scopes.includes('consume') || scopes.includes('admin')
          ? null
          : new RollcallIntegrationError(
              'token_refused',
              `rollcall's token for tenant "${tenant}" lacks the consume scope (it has: ${scopes.join(', ') || 'none'}), so no ack would be taken`,
            ),
      // Only a 401: the look-up needs no scope, so a 403 there is a proxy's, not rollcall's word on the token.
      (error: unknown) =>
        error instanceof RollcallApiError && error.status === 401
          ? new RollcallIntegrationError('token_refused', `rollcall refuses this worker's token: ${(error as Error).message}`, { cause: error })
          : null,
    );
    try {
      return await Promise.race([answer, noAnswer]);
    } finally {
      clearTimeout(timer);
    }
  }

  private warnOf(refusal: RollcallIntegrationError): void {
    if (this.checkedAt - this.warnedAt < WARN_EVERY_MS) return;
    this.warnedAt = this.checkedAt;
    warn(refusal);
  }
}

const SHARED = new WeakMap<RollcallClient, TokenCheck>();

/** The process's token check for this client: every processor of the client learns from the others' acks. */
export function sharedTokenCheck(client: RollcallClient): TokenCheck {
  let check = SHARED.get(client);
  if (!check) SHARED.set(client, (check = new TokenCheck(client)));
  return check;
}
