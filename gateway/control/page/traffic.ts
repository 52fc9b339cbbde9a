/**
 * The overview's traffic figures: per model, requests/s in each of the last 60 minutes and TTFT p50/p99 over the
 * hour, from the gateways' minute counts (model_minute_stats, summed over gateways). Read at most every 10 s.
 */
import type { ModelMinute, ModelStatsStore } from '../../../lib/store/model-stats';
import { TTFT_SLOTS, ttftQuantile } from '../../../lib/stats/ttft';

/** Minutes the overview shows. */
export const TRAFFIC_MINUTES = 60;

/** One model's last hour. */
export interface ModelTraffic {
  model: string;
  /** requests/s in each minute, oldest first, the current (partial) minute last; 0 where none */
  rps: number[];
  /** TTFT p50 per minute, ms, null where no answer */
  p50PerMinute: (number | null)[];
  /** start of the first minute (ISO) */
  since: string;
  requests: number;
  errors5xx: number;
  errors4xx: number;
  /** TTFT over the hour, ms (interpolated inside the histogram's buckets), null when no answer */
  ttftP50Ms: number | null;
  ttftP99Ms: number | null;
}

const round = (x: number | null, digits: number): number | null =>
  x === null ? null : Math.round(x * 10 ** digits) / 10 ** digits;

/**
 * Folds minute rows into each model's hour at `now`: every model of `models` (none of its requests shows as zero)
 * and every model with rows, by name. The current minute's rate is over the seconds it has run (at least 5).
 */
export function trafficView(rows: readonly ModelMinute[], models: readonly string[], now: number): ModelTraffic[] {
  const last = now - (now % 60_000);
  const first = last - (TRAFFIC_MINUTES - 1) * 60_000;
  const names = [...new Set([...models, ...rows.map((r) => r.model)])].sort();
  return names.map((model) => {
    const rps = new Array<number>(TRAFFIC_MINUTES).fill(0);
    const p50PerMinute = new Array<number | null>(TRAFFIC_MINUTES).fill(null);
    const hour = new Array<number>(TTFT_SLOTS).fill(0);
    let requests = 0;
    let errors5xx = 0;
    let errors4xx = 0;
    for (const r of rows) {
      if (r.model !== model || r.minute < first || r.minute > last) continue;
      const i = (r.minute - first) / 60_000;
      const seconds = r.minute === last ? Math.max(5, (now - last) / 1000) : 60;
      rps[i] = round(r.requests / seconds, 3)!;
      p50PerMinute[i] = round(ttftQuantile(r.ttft, 0.5), 1);
      for (let b = 0; b < TTFT_SLOTS; b++) hour[b]! += r.ttft[b] ?? 0;
      requests += r.requests;
      errors5xx += r.errors5xx;
      errors4xx += r.errors4xx;
    }
    return {
      model,
      rps,
      p50PerMinute,
      since: new Date(first).toISOString(),
      requests,
      errors5xx,
      errors4xx,
      ttftP50Ms: round(ttftQuantile(hour, 0.5), 1),
      ttftP99Ms: round(ttftQuantile(hour, 0.99), 1),
    };
  });
}

/** The minute rows of the last hour, read from MySQL at most once per `everyMs` (the page's snapshot runs every second). */
export class RecentTraffic {
  private rows: Promise<ModelMinute[]> | null = null;
  private at = 0;

  constructor(
    private readonly store: Pick<ModelStatsStore, 'recent'>,
    private readonly everyMs = 10_000,
  ) {}

  /** Each model's hour now; `models` are the catalog's (shown even without requests). */
  async view(models: readonly string[], now = Date.now()): Promise<ModelTraffic[]> {
    if (!this.rows || now - this.at >= this.everyMs) {
      this.at = now;
      const read = this.store.recent(TRAFFIC_MINUTES);
      // A failed read is retried at the next snapshot rather than cached.
      read.catch(() => void (this.rows = null));
      this.rows = read;
    }
    return trafficView(await this.rows, models, now);
  }
}
