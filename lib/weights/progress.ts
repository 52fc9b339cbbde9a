/**
 * A weights fetch's progress: what each fetchWeights heartbeat carries (the Temporal UI shows it as the pending
 * activity's heartbeat details; `llmgw ctl weights` and `ctl deploy` print it), a rate meter, and one-line text.
 */

export const WEIGHTS_PHASES = ['checking', 'hashing-partial', 'downloading', 'verifying', 'done'] as const;
export type WeightsPhase = (typeof WEIGHTS_PHASES)[number];

/** One heartbeat of a weights fetch. */
export interface WeightsProgress {
  phase: WeightsPhase;
  /** the cache key (`sha256-<hex>` or `url-<hash>`) */
  key: string;
  /** the catalog's URL */
  url: string;
  /** where the bytes come from now: `origin` or `peer <node>` */
  from: string;
  /** bytes of the file on disk so far (a resumed partial included) */
  bytesDone: number;
  /** the file's size, once the server said it */
  total: number | null;
  /** bytes per second over the last few seconds */
  rateBps: number;
  /** bytes already on disk when this transfer began (0: from the start) */
  resumedFrom: number;
  /** how many fetchWeights activities on this node wait for this one download */
  waiters: number;
}

/** Bytes per second over a sliding window. */
export class RateMeter {
  private readonly samples: { t: number; bytes: number }[] = [];

  constructor(
    private readonly windowMs = 5000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Records that `bytes` in all have been transferred by now; returns the current rate. */
  add(bytes: number): number {
    const t = this.now();
    this.samples.push({ t, bytes });
    while (this.samples.length > 2 && (this.samples[0] as { t: number }).t < t - this.windowMs) this.samples.shift();
    return this.rate();
  }

  /** The rate over the window (0 until two samples are apart in time). */
  rate(): number {
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    if (!first || !last || last.t <= first.t) return 0;
    return ((last.bytes - first.bytes) * 1000) / (last.t - first.t);
  }
}

/** 1536 → "1.5 KiB". */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${units[i]}`;
}

/** "downloading from origin: 1.2 GiB of 4.0 GiB (30%), 85.3 MiB/s, resumed at 512 MiB". */
export function formatProgress(p: WeightsProgress): string {
  const of =
    p.total === null
      ? ''
      : ` of ${formatBytes(p.total)} (${p.total ? Math.floor((p.bytesDone * 100) / p.total) : 100}%)`;
  const rate = p.phase === 'downloading' ? `, ${formatBytes(Math.round(p.rateBps))}/s` : '';
  const resumed = p.resumedFrom > 0 ? `, resumed at ${formatBytes(p.resumedFrom)}` : '';
  const shared = p.waiters > 1 ? `, ${p.waiters} waiting on it` : '';
  return `${p.phase} from ${p.from}: ${formatBytes(p.bytesDone)}${of}${rate}${resumed}${shared}`;
}

/** True for a value shaped like a WeightsProgress (heartbeat details read back from Temporal). */
export function isWeightsProgress(v: unknown): v is WeightsProgress {
  const o = v as Partial<WeightsProgress> | null;
  return (
    typeof o === 'object' &&
    o !== null &&
    typeof o.key === 'string' &&
    typeof o.bytesDone === 'number' &&
    WEIGHTS_PHASES.includes(o.phase as WeightsPhase)
  );
}
