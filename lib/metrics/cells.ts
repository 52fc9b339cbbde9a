/**
 * Counters and histograms for a request path: prom-client's own hash their labels on every call, these are plain
 * numbers in a cell the caller keeps (one per label set), turned into prom-client's metric shape only when scraped.
 * They register in a prom-client Registry like any metric, so one exposition serves both kinds.
 */
import type { Registry } from 'prom-client';

type Labels = Record<string, string>;
interface MetricValue {
  value: number;
  labels: Labels;
  metricName?: string;
}

/** One label set's count. */
export interface CounterCell {
  readonly labels: Labels;
  value: number;
}

/** One label set's histogram: counts per bucket (not cumulative; the last is +Inf), sum and count. */
export interface HistogramCell {
  readonly labels: Labels;
  readonly counts: Float64Array;
  sum: number;
  count: number;
}

/** A counter whose label sets are cells the caller holds. */
export class CellCounter {
  readonly type = 'counter';
  readonly aggregator = 'sum';
  private readonly cells: CounterCell[] = [];

  constructor(
    readonly name: string,
    readonly help: string,
    registry: Registry,
  ) {
    registry.registerMetric(this as never);
  }

  /** A new cell for `labels` (call once per label set and keep it). */
  cell(labels: Labels): CounterCell {
    const c = { labels, value: 0 };
    this.cells.push(c);
    return c;
  }

  /** prom-client's scrape. */
  get(): { name: string; help: string; type: string; aggregator: string; values: MetricValue[] } {
    return { ...this.meta(), values: this.cells.map((c) => ({ value: c.value, labels: c.labels })) };
  }

  private meta(): { name: string; help: string; type: string; aggregator: string } {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator };
  }
}

/** A histogram whose label sets are cells the caller holds. */
export class CellHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly cells: HistogramCell[] = [];

  constructor(
    readonly name: string,
    readonly help: string,
    readonly bounds: readonly number[],
    registry: Registry,
  ) {
    registry.registerMetric(this as never);
  }

  /** A new cell for `labels` (call once per label set and keep it). */
  cell(labels: Labels): HistogramCell {
    const c = { labels, counts: new Float64Array(this.bounds.length + 1), sum: 0, count: 0 };
    this.cells.push(c);
    return c;
  }

  /** Records `v` in `cell`. */
  observe(cell: HistogramCell, v: number): void {
    const b = this.bounds;
    let i = 0;
    while (i < b.length && v > b[i]) i++;
    cell.counts[i]++;
    cell.sum += v;
    cell.count++;
  }

  /** prom-client's scrape: cumulative buckets, then sum and count, per cell. */
  get(): { name: string; help: string; type: string; aggregator: string; values: MetricValue[] } {
    const values: MetricValue[] = [];
    for (const c of this.cells) {
      let acc = 0;
      this.bounds.forEach((le, i) => {
        acc += c.counts[i];
        values.push({ value: acc, labels: { ...c.labels, le: String(le) }, metricName: `${this.name}_bucket` });
      });
      values.push({ value: c.count, labels: { ...c.labels, le: '+Inf' }, metricName: `${this.name}_bucket` });
      values.push({ value: c.sum, labels: c.labels, metricName: `${this.name}_sum` });
      values.push({ value: c.count, labels: c.labels, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}
