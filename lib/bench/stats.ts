/** Percentiles, summaries and a bootstrap interval for load-generator and benchmark figures. Pure, no I/O. */
import { seededRandom } from '../random';

/** p50, p90, p99, the mean and the largest of a sample (milliseconds, or whatever the sample is in). */
export interface Summary {
  n: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** The `q` quantile (0..1) of an ascending sample, interpolated linearly between neighbours; NaN when empty. */
export function quantileSorted(sorted: ArrayLike<number>, q: number): number {
  const n = sorted.length;
  if (n === 0) return Number.NaN;
  const k = (n - 1) * Math.min(1, Math.max(0, q));
  const lo = Math.floor(k);
  const hi = Math.min(lo + 1, n - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (k - lo);
}

/** The `q` quantile (0..1) of an unsorted sample (sorts a copy). */
export function quantile(xs: ArrayLike<number>, q: number): number {
  return quantileSorted(Float64Array.from(xs).sort(), q);
}

/** The summary of a sample, or null when it is empty. */
export function summarize(xs: ArrayLike<number>): Summary | null {
  if (xs.length === 0) return null;
  const s = Float64Array.from(xs).sort();
  let sum = 0;
  for (const x of s) sum += x;
  return {
    n: s.length,
    mean: sum / s.length,
    p50: quantileSorted(s, 0.5),
    p90: quantileSorted(s, 0.9),
    p99: quantileSorted(s, 0.99),
    max: s[s.length - 1],
  };
}

/** The 95 % bootstrap interval of the median: `reps` resamples with replacement; [NaN, NaN] when empty. */
export function medianCi95(xs: ArrayLike<number>, reps = 2000, seed = 1): [number, number] {
  const n = xs.length;
  if (n === 0) return [Number.NaN, Number.NaN];
  const rnd = seededRandom(seed); // the same seed gives the same interval: a report does not flicker between runs of it
  const sample = new Float64Array(n);
  const medians = new Float64Array(reps);
  for (let r = 0; r < reps; r++) {
    for (let i = 0; i < n; i++) sample[i] = xs[Math.floor(rnd() * n)];
    medians[r] = quantileSorted(sample.sort(), 0.5);
  }
  medians.sort();
  return [medians[Math.floor(reps * 0.025)], medians[Math.min(reps - 1, Math.floor(reps * 0.975))]];
}

/** Per-round differences `a[i] − b[i]` over the rounds both have (NaN marks a round a path failed). */
export function pairedDifferences(a: ArrayLike<number>, b: ArrayLike<number>): number[] {
  const out: number[] = [];
  for (let i = 0; i < Math.min(a.length, b.length); i++)
    if (!Number.isNaN(a[i]) && !Number.isNaN(b[i])) out.push(a[i] - b[i]);
  return out;
}
