/** A load generator: a few clients sending chat completions through the gateway back to back, counting what failed. */
import { TEST_API_KEY } from './test-key';

export interface LoadStats {
  sent: number;
  ok: number;
  failed: number;
  /** The first few failures: status and body, or the network error. */
  failures: string[];
  durationMs: number;
}

export interface Load {
  stats(): LoadStats;
  stop(): Promise<LoadStats>;
}

/** Starts `clients` loops against `${gatewayUrl}/v1/chat/completions` for `model`; stop() waits for the last ones. */
export function startLoad(
  gatewayUrl: string,
  model: string,
  o: { clients?: number; stream?: boolean; maxTokens?: number; apiKey?: string } = {},
): Load {
  const started = Date.now();
  const s = { sent: 0, ok: 0, failed: 0, failures: [] as string[] };
  let running = true;
  const body = JSON.stringify({
    model,
    stream: o.stream ?? false,
    max_tokens: o.maxTokens ?? 4,
    messages: [{ role: 'user', content: 'load' }],
  });
  const fail = (why: string): void => {
    s.failed++;
    if (s.failures.length < 10) s.failures.push(why);
  };
  const one = async (): Promise<void> => {
    s.sent++;
    try {
      const res = await fetch(`${gatewayUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${o.apiKey ?? TEST_API_KEY}` },
        body,
        signal: AbortSignal.timeout(30_000),
      });
      const text = await res.text();
      // A streamed answer that broke off midway has no [DONE]; a whole one does.
      if (res.status === 200 && (!o.stream || text.includes('data: [DONE]'))) s.ok++;
      else fail(`${res.status} ${text.slice(0, 300)}`);
    } catch (err) {
      fail(`network: ${(err as Error).message}`);
    }
  };
  const loops = Array.from({ length: o.clients ?? 4 }, async () => {
    while (running) await one();
  });
  const stats = (): LoadStats => ({ ...s, failures: [...s.failures], durationMs: Date.now() - started });
  return {
    stats,
    async stop(): Promise<LoadStats> {
      running = false;
      await Promise.all(loops);
      return stats();
    },
  };
}

/** Waits until the gateway routes `model` (its routing table refreshes on its own schedule). */
export async function waitRoutable(
  gatewayUrl: string,
  model: string,
  timeoutMs = 10_000,
  apiKey = TEST_API_KEY,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    const res = await fetch(`${gatewayUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({ model, max_tokens: 1, messages: [{ role: 'user', content: 'probe' }] }),
    });
    last = `${res.status} ${(await res.text()).slice(0, 200)}`;
    if (res.status === 200) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`the gateway did not route ${model} within ${timeoutMs}ms; last answer: ${last}`);
}
