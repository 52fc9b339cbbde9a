/**
 * TTFT histograms: the fixed bucket bounds the gateway counts into (and MySQL's model_minute_stats columns hold),
 * and percentiles read back from summed bucket counts. Pure code, shared by the gateway and the control plane.
 */

/** Upper bounds of the TTFT buckets, ms; one more bucket (+Inf) follows the last. Columns ttft_le_<n> / ttft_inf. */
export const TTFT_BUCKETS_MS = [10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000] as const;
/** How many counts a histogram holds: one per bound, and +Inf. */
export const TTFT_SLOTS = TTFT_BUCKETS_MS.length + 1;

/** The bucket a TTFT falls in: the first whose bound is ≥ ms, else the +Inf bucket. */
export function ttftSlot(ms: number): number {
  for (let i = 0; i < TTFT_BUCKETS_MS.length; i++) if (ms <= TTFT_BUCKETS_MS[i]!) return i;
  return TTFT_BUCKETS_MS.length;
}

/**
 * The q-quantile (0 < q ≤ 1) of a histogram, ms, or null when it is empty. Linear interpolation inside the bucket
 * the rank falls in (from its lower bound, 0 for the first, to its upper bound), as Prometheus' histogram_quantile
 * does; a rank in the +Inf bucket answers the last finite bound (the true value is only known to be above it).
 */
export function ttftQuantile(counts: ArrayLike<number>, q: number): number | null {
  let total = 0;
  for (let i = 0; i < counts.length; i++) total += counts[i]!;
  if (total === 0) return null;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < TTFT_BUCKETS_MS.length; i++) {
    const n = counts[i]!;
    if (n > 0 && below + n >= rank) {
      const lo = i === 0 ? 0 : TTFT_BUCKETS_MS[i - 1]!;
      const hi = TTFT_BUCKETS_MS[i]!;
      return lo + ((hi - lo) * (rank - below)) / n;
    }
    below += n;
  }
  return TTFT_BUCKETS_MS[TTFT_BUCKETS_MS.length - 1]!;
}
