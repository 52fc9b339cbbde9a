/**
 * The gateway's model stats report: every few seconds, the per-model minute counts of its ModelStats written to
 * MySQL (model_minute_stats) as this gateway's cumulative counts, a finished minute's final counts included; now
 * and then, rows older than two hours deleted. A timer reads memory; the request path never waits on MySQL, and
 * an outage loses at most the minutes it outlasts (ModelStats keeps a few), logged once.
 */
import type { ModelMinute } from '../../lib/store/model-stats';
import type { ModelStats } from './model-stats';

/** Where the counts go: the ModelStatsStore (or a fake in tests). */
export interface StatsSink {
  write(gatewayId: string, rows: readonly ModelMinute[]): Promise<void>;
  prune(): Promise<number>;
}

/** Options of a StatsReporter. */
export interface StatsReporterOptions {
  stats: ModelStats;
  sink: StatsSink;
  /** the gateway's id (the in-flight reporter's: one id per gateway process) */
  gatewayId: string;
  /** how often the counts are written, ms (default 5000) */
  periodMs?: number;
  /** how often old rows are deleted, ms (default 10 minutes) */
  pruneEveryMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** Writes a gateway's model stats in the background. */
export class StatsReporter {
  private timer: NodeJS.Timeout | null = null;
  private writing: Promise<void> | null = null;
  private failing = false;
  private prunedAt = 0;
  private readonly log: NonNullable<StatsReporterOptions['log']>;

  constructor(private readonly o: StatsReporterOptions) {
    this.log = o.log ?? ((): void => undefined);
  }

  /** Checks every period in the background (the timer keeps nothing alive). */
  start(): void {
    this.timer = setInterval(() => void this.tick(), this.o.periodMs ?? 5000);
    this.timer.unref();
  }

  /** One write of everything pending (never two at once); resolves when done. Failures are logged once, not thrown. */
  tick(): Promise<void> {
    if (this.writing) return this.writing;
    const { stats, sink, gatewayId } = this.o;
    if (stats.dropped) {
      this.log('model stats: minutes not written were dropped', { gateway: gatewayId, minutes: stats.dropped });
      stats.dropped = 0;
    }
    const rows = stats.pending();
    const pruneDue = Date.now() - this.prunedAt >= (this.o.pruneEveryMs ?? 600_000);
    this.writing = (async (): Promise<void> => {
      await sink.write(gatewayId, rows);
      stats.written(rows);
      if (pruneDue) {
        await sink.prune();
        this.prunedAt = Date.now();
      }
    })()
      .then(
        () => {
          if (this.failing) this.log('model stats written again', { gateway: gatewayId });
          this.failing = false;
        },
        (err: Error) => {
          if (!this.failing)
            this.log('model stats not written; the cluster page misses this gateway until they are', {
              level: 'warn',
              gateway: gatewayId,
              error: err.message,
            });
          this.failing = true;
        },
      )
      .finally(() => void (this.writing = null));
    return this.writing;
  }

  /** Stops the timer and writes what is left (call once the server has closed: every request is counted). */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.writing;
    await this.tick();
  }
}
