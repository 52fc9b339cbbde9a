/**
 * How many requests a replica's engine serves at once, as it reports it: llama.cpp's `GET /props` answers
 * `total_slots` (its `--parallel`), and so does the sim engine (its `--slots`). vLLM and SGLang report none.
 */
import { doorGet, type DoorAgent } from '../../lib/door-agent';
import type { RoutableReplica } from './routing';

/** How long the one question to a new replica may take, ms. */
const PROBE_MS = 2000;

/**
 * Asks `replica` for its slots: a positive integer, or null when it does not say (any error, any other answer).
 * A replica behind a node's door is asked through it, with `doorAgent`.
 */
export async function probeSlots(replica: RoutableReplica, doorAgent?: DoorAgent | null): Promise<number | null> {
  try {
    let body: string | null = null;
    const door = replica.door;
    if (door) {
      if (doorAgent) {
        const r = await doorGet(
          doorAgent,
          { ...door, host: replica.host, port: replica.port, replica: replica.id },
          '/props',
          PROBE_MS,
        );
        body = r.status === 200 ? r.body : null;
      }
    } else {
      const r = await fetch(`${replica.endpoint}/props`, { signal: AbortSignal.timeout(PROBE_MS) });
      body = r.ok ? await r.text() : null;
    }
    if (body === null) return null;
    const n = (JSON.parse(body) as { total_slots?: unknown }).total_slots;
    return typeof n === 'number' && Number.isInteger(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}
