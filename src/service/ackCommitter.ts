import { AckCall, callSize } from '../domain/ackCall';
import { AckResult, ackItems } from './ackItems';
import { ServiceDeps } from './deps';

export interface GroupCommitOptions {
  /** How long the first call of a group waits for others to join it. */
  windowMs: number;
  /** A group is closed early once it holds this many IDs. */
  maxIds: number;
}

interface Waiting {
  call: AckCall;
  resolve: (result: AckResult) => void;
  reject: (error: unknown) => void;
}


/**
 * Group commit for acks: calls that arrive while a transaction is running, or within `windowMs` of
 * each other, are merged into one transaction. Each caller gets its own result, and only after the
 * commit; if the transaction fails, every merged caller gets the error. One transaction is in flight
 * at a time per process, so the next group fills while the current one commits.
 */
export class AckCommitter {
  /** Transactions run and calls answered through them (calls / transactions = merge factor). */
  readonly stats = { transactions: 0, calls: 0, ids: 0 };
  private queue: Waiting[] = [];
  private queuedIds = 0;
  private timer: NodeJS.Timeout | null = null;
  private inFlight: Promise<void> | null = null;

  constructor(
    private readonly deps: ServiceDeps,
    private readonly options: GroupCommitOptions,
    private readonly onGroup?: (calls: number, ids: number) => void,
  ) {}

  submit(call: AckCall): Promise<AckResult> {
    return new Promise<AckResult>((resolve, reject) => {
      this.queue.push({ call, resolve, reject });
      this.queuedIds += callSize(call);
      this.schedule();
    });
  }

  /** Resolves once every submitted call has been answered. */
  async drain(): Promise<void> {
    while (this.inFlight || this.queue.length > 0) {
      if (!this.inFlight) this.flush();
      await this.inFlight;
    }
  }

  private schedule(): void {
    if (this.inFlight) return; // the running group's end starts the next one
    if (this.queuedIds >= this.options.maxIds || this.options.windowMs === 0) {
      this.flush();
    } else if (!this.timer) {
      this.timer = setTimeout(() => this.flush(), this.options.windowMs);
    }
  }

  private takeGroup(): Waiting[] {
    const group: Waiting[] = [];
    let ids = 0;
    while (this.queue.length > 0) {
      const next = this.queue[0] as Waiting;
      if (group.length > 0 && ids + callSize(next.call) > this.options.maxIds) break;
      this.queue.shift();
      ids += callSize(next.call);
      group.push(next);
    }
    this.queuedIds -= ids;
    return group;
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.inFlight || this.queue.length === 0) return;
    const group = this.takeGroup();
    const ids = group.reduce((n, w) => n + callSize(w.call), 0);
    this.stats.transactions += 1;
    this.stats.calls += group.length;
    this.stats.ids += ids;
    this.onGroup?.(group.length, ids);
    this.inFlight = ackItems(
      this.deps,
      group.map((w) => w.call),
    ).then(
      (results) => group.forEach((w, i) => w.resolve(results[i] as AckResult)),
      (error: unknown) => group.forEach((w) => w.reject(error)),
    );
    void this.inFlight.finally(() => {
      this.inFlight = null;
      // Calls that queued meanwhile have waited a whole transaction already: run them now.
      if (this.queue.length > 0) this.flush();
    });
  }
}
