import type { Logger } from 'pino';

import { toError } from '../domain/errors';

/**
 * Runs `task` now and then every `intervalMs` after each run ends (never two runs at once),
 * or sooner when `wake()` is called. `stop()` waits for a run in progress.
 */
export class PeriodicTask {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = true;
  private wakeAgain = false;

  constructor(
    private readonly name: string,
    private readonly intervalMs: number,
    private readonly task: () => Promise<unknown>,
    private readonly log: Logger,
  ) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /** Runs as soon as possible (after the current run, if one is in progress). */
  wake(): void {
    if (this.stopped) return;
    if (this.running) this.wakeAgain = true;
    else this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  private schedule(delayMs: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.run(), delayMs);
    this.timer.unref();
  }

  private async run(): Promise<void> {
    this.timer = null;
    if (this.stopped || this.running) return;
    this.running = this.task()
      .then(() => undefined)
      .catch((caught: unknown) => this.log.warn({ err: toError(caught), task: this.name }, 'background task failed; will retry'));
    await this.running;
    this.running = null;
    if (this.stopped) return;
    const again = this.wakeAgain;
    this.wakeAgain = false;
    this.schedule(again ? 0 : this.intervalMs);
  }
}
