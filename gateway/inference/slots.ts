/**
 * How many requests a replica's engine serves at once, as it reports it: llama.cpp's `GET /props` answers
 * `total_slots` (its `--parallel`), and so does the sim engine (its `--slots`). vLLM and SGLang report none.
 */
import { get } from 'node:https';
import type { DoorAgent } from './door-agent';
import type { RoutableReplica } from './routing';

/** How long the one question to a new replica may take, ms. */
const PROBE_MS = 2000;

/** GET `${replica.endpoint}/props` through its node's door (the gateway certificate's pool): the body, or null. */
function doorProps(replica: RoutableReplica, agent: DoorAgent): Promise<string | null> {
  const door = replica.door;
  if (!door) return Promise.resolve(null);
  return new Promise((resolve) => {
    const req = get(
      { agent, host: replica.host, port: replica.port, servername: door.node, path: `${door.base}/props`, timeout: PROBE_MS },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.once('end', () => resolve(res.statusCode === 200 ? Buffer.concat(chunks).toString('utf8') : null));
        res.once('error', () => resolve(null));
      },
    );
    req.once('timeout', () => req.destroy(new Error('timeout')));
    req.once('error', () => resolve(null));
  });
}

/**
 * Asks `replica` for its slots: a positive integer, or null when it does not say (any error, any other answer).
 * A replica behind a node's door is asked through it, with `doorAgent`.
 */
export async function probeSlots(replica: RoutableReplica, doorAgent?: DoorAgent): Promise<number | null> {
  try {
    let body: string | null;
    if (replica.door) body = doorAgent ? await doorProps(replica, doorAgent) : null;
    else {
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
