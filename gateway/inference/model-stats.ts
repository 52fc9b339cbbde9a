/**
 * Per-model request statistics of one gateway, per UTC minute: requests, 5xx and 4xx answers, and a TTFT histogram
 * (lib/stats/ttft.ts). The proxy records each finished request (`record`, on the request path: counters in arrays
 * allocated once per model and minute); the stats reporter reads `pending()` in the background and writes it to MySQL.
 *
 * TTFT here is the time from the gateway having the whole request (body read and checked, a replica picked) to the
 * first byte of the answer's body passed on to the client: the first token event of a stream, the first byte of a
 * whole answer. Answers the gateway makes itself (no replica answered) have none.
 */
import { TTFT_SLOTS, ttftSlot } from '../../lib/stats/ttft';

/** One model's counts in one minute: cumulative while the minute runs. */
export interface MinuteCounts {
  requests: number;
  /** answers with status ≥ 500 */
  errors5xx: number;
  /** answers with status 400–499 (a client that left before any answer counts as 499) */
  errors4xx: number;
  /** TTFT histogram, one count per TTFT_BUCKETS_MS bound and +Inf */
  ttft: Uint32Array;
}

/** A row for the store: one model's counts in one minute (the minute's start, ms since the epoch, UTC). */
export interface MinuteRow extends MinuteCounts {
  minute: number;
  model: string;
  /** the minute had ended when the row was read: these are its final counts */
  final: boolean;
}

/** Finished minutes kept while they cannot be written (MySQL down): older ones are dropped. */
const KEEP_FINISHED = 3;

/** The current minute of `ms`, as the minute's start in ms. */
export const minuteOf = (ms: number): number => ms - (ms % 60_000);

/** Counts finished requests per model and minute, until the reporter has written them. */
export class ModelStats {
  private minute: number;
  private current = new Map<string, MinuteCounts>();
  /** Finished minutes not written yet, oldest first. */
  private finished: { minute: number; models: Map<string, MinuteCounts> }[] = [];
  /** Finished minutes dropped unwritten since the last pending() (the reporter logs them). */
  dropped = 0;

  constructor(private readonly now: () => number = Date.now) {
    this.minute = minuteOf(now());
  }

  /** Counts one finished request: its status (0 = none sent) and TTFT in ms, or null when no answer byte was sent. */
  record(model: string, status: number, ttftMs: number | null): void {
    this.roll();
    let c = this.current.get(model);
    if (!c)
      this.current.set(model, (c = { requests: 0, errors5xx: 0, errors4xx: 0, ttft: new Uint32Array(TTFT_SLOTS) }));
    c.requests++;
    if (status >= 500) c.errors5xx++;
    else if (status >= 400) c.errors4xx++;
    if (ttftMs !== null) c.ttft[ttftSlot(ttftMs)]!++;
  }

  /**
   * Every row not yet written for good: the unwritten finished minutes with their final counts, and the current
   * minute's counts so far (copies). Pass them to `written` once stored.
   */
  pending(): MinuteRow[] {
    this.roll();
    const rows: MinuteRow[] = [];
    const add = (minute: number, models: Map<string, MinuteCounts>, final: boolean): void => {
      for (const [model, c] of models) rows.push({ minute, model, final, ...c, ttft: c.ttft.slice() });
    };
    for (const f of this.finished) add(f.minute, f.models, true);
    add(this.minute, this.current, false);
    return rows;
  }

  /**
   * The rows of a pending() were stored: their final minutes are done. The current minute's are rewritten at the
   * next write (also when it ended meanwhile: it is final only in a later pending()).
   */
  written(rows: MinuteRow[]): void {
    const done = new Set(rows.filter((r) => r.final).map((r) => r.minute));
    this.finished = this.finished.filter((f) => !done.has(f.minute));
  }

  /** Starts a new minute when the clock has passed the current one. */
  private roll(): void {
    const m = minuteOf(this.now());
    if (m === this.minute) return;
    if (this.current.size) this.finished.push({ minute: this.minute, models: this.current });
    while (this.finished.length > KEEP_FINISHED) {
      this.finished.shift();
      this.dropped++;
    }
    this.minute = m;
    this.current = new Map();
  }
}
