import { AckCall, callSize } from '../domain/ackCall';
import { AckResult, ackItems } from './ackItems';
import { ServiceDeps } from './deps';

export interface GroupCommitOptions {
  /** How long the first call of a group waits for others to join it. */
  windowMs: number;
  /** A group is closed early once it holds this many IDs. */
  maxIds: number;
  /** Merged transactions in flight at once; the next one's start overlaps the previous one's commit. */
  concurrency: number;
}

interface Waiting {
  call: AckCall;
  resolve: (result: AckResult) => void;
  reject: (error: unknown) => void;
}

/**
 * Group commit for acks: calls that arrive while transactions are running, or within `windowMs`
 * of each other, are merged into one transaction. Each caller gets its own result, and only after
 * the commit; if the transaction fails, every merged caller gets the error. At most `concurrency`
 * merged transactions run at once (they take the same locks in the same order, so one that touches
 * a batch another holds simply waits for its commit).
 */
export class AckCommitter {
  /** Transactions run and calls answered through them (calls / transactions = merge factor). */
  readonly stats = { transactions: 0, calls: 0, ids: 0 };
  private queue: Waiting[] = [];
  private queuedIds = 0;
  private timer: NodeJS.Timeout | null = null;
  private readonly inFlight = new Set<Promise<void>>();

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
    while (this.inFlight.size > 0 || this.queue.length > 0) {
      if (this.inFlight.size === 0) this.flush();
      await Promise.race(this.inFlight);
    }
  }

  private schedule(): void {
    if (this.inFlight.size >= this.options.concurrency) return; // a finishing transaction starts the next group
    if (this.queuedIds >= this.options.maxIds || this.options.windowMs === 0) {
      this.flush();
    } else if (!this.timer) {
      this.timer = setTimeout(() => this.flush(), this.options.windowMs);
    }
  }

  private takeGroup(): Waiting[] {
    let ids = 0;
    let count = 0;
    for (const waiting of this.queue) {
      const size = callSize(waiting.call);
      if (count > 0 && ids + size > this.options.maxIds) break;
      ids += size;
      count += 1;
    }
    this.queuedIds -= ids;
    return this.queue.splice(0, count);
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.inFlight.size >= this.options.concurrency || this.queue.length === 0) return;
    const group = this.takeGroup();
    const ids = group.reduce((n, w) => n + callSize(w.call), 0);
    this.stats.transactions += 1;
    this.stats.calls += group.length;
    this.stats.ids += ids;
    this.onGroup?.(group.length, ids);
    const running: Promise<void> = ackItems(
      this.deps,
      group.map((w) => w.call),
    )
      .then(
        (results) => group.forEach((w, i) => w.resolve(results[i] as AckResult)),
        (error: unknown) => group.forEach((w) => w.reject(error)),
      )
      .finally(() => {
        this.inFlight.delete(running);
        // Calls that queued meanwhile have waited a whole transaction already: run them now.
        if (this.queue.length > 0) this.flush();
      });
    this.inFlight.add(running);
  }
}
