/** The task-token pruning: tokens the door handed out for tasks nobody answered (their worker died) are forgotten. */
import type { Store } from '../../lib/store/store';

/** How often old tokens are pruned. */
const PRUNE_EVERY_MS = 3_600_000;
/** How long a token is kept: 90 days, a node certificate's lifetime. */
const KEEP_MS = 90 * 86_400_000;

/** Prunes task tokens older than 90 days from MySQL: at start, then every hour. */
export class TaskTokenPruning {
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: { store: Pick<Store, 'pruneTaskTokens'> }) {}

  /** Prunes now and starts the hourly timer (which does not keep the process alive). */
  start(): void {
    this.prune();
    this.timer = setInterval(() => this.prune(), PRUNE_EVERY_MS);
    this.timer.unref();
  }

  /** Stops the timer; a prune in flight finishes. */
  stop(): void {
    clearInterval(this.timer);
  }

  /** One prune; a failure waits for the next. */
  private prune(): void {
    void this.o.store.pruneTaskTokens(new Date(Date.now() - KEEP_MS)).catch(() => undefined);
  }
}
