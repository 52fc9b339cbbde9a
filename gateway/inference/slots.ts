/**
 * How many requests a replica's engine serves at once, as it reports it: llama.cpp's `GET /props` answers
 * `total_slots` (its `--parallel`), and so does the sim engine (its `--slots`). vLLM and SGLang report none.
 */
import type { RoutableReplica } from './routing';

/** How long the one question to a new replica may take, ms. */
const PROBE_MS = 2000;

/** Asks `replica` for its slots: a positive integer, or null when it does not say (any error, any other answer). */
export async function probeSlots(replica: RoutableReplica): Promise<number | null> {
  try {
    const r = await fetch(`${replica.endpoint}/props`, { signal: AbortSignal.timeout(PROBE_MS) });
    if (!r.ok) return null;
    const n = ((await r.json()) as { total_slots?: unknown }).total_slots;
    return typeof n === 'number' && Number.isInteger(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}
