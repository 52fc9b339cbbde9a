/**
 * Tokens per second of the tiny generated model on the real llama-server (this machine's build, .tools/), streamed,
 * sequential, N completions per leg, medians. Legs: `direct` to llama-server, and with `--gateway URL` the same
 * requests through an OpenAI-compatible gateway that routes `--model` to that llama-server, interleaved request by
 * request so both see the same machine load; they print side by side.
 *
 *   npm run bench:llama -- [--n 20] [--max-tokens 64] [--gateway http://127.0.0.1:8080/v1 --model tiny-llama --api-key K]
 *   [--llama-server URL]   (an already running llama-server /v1 base instead of starting one on the tiny model)
 *
 * Per completion: tokens (usage.completion_tokens), end-to-end tokens/s (tokens / request time), decode tokens/s
 * (tokens after the first / time from first to last token), and time to first token. The tiny model never stops
 * early (lib/engines/tiny-gguf.ts), so every completion is exactly --max-tokens long.
 */
import '../helpers/bench-help'; // --help: the comment above
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { writeTinyLlamaGguf } from '../../lib/engines/tiny-gguf';
import { startLlamaServer, type EngineProc } from '../helpers/llama-server';

/** One place requests go: a /v1 base URL, the model name it routes, and its headers. */
export interface Leg {
  name: string;
  baseUrl: string;
  model: string;
  headers?: Record<string, string>;
}

interface Sample {
  tokens: number;
  totalMs: number;
  ttftMs: number;
  decodeMs: number;
  /** llama-server's own decode rate (its `timings.predicted_per_second`), when it came through */
  serverTps: number | null;
}

/** One streamed chat completion, timed from request to the last SSE event. */
export async function streamOnce(leg: Leg, maxTokens: number, prompt: string): Promise<Sample> {
  const t0 = performance.now();
  const r = await fetch(`${leg.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...leg.headers },
    body: JSON.stringify({
      model: leg.model,
      messages: [{ role: 'user', content: prompt }],
      max_tokens: maxTokens,
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  if (r.status !== 200 || !r.body) throw new Error(`${leg.name}: HTTP ${r.status} ${await r.text()}`);
  let buf = '';
  let first = 0,
    last = 0,
    tokens = 0,
    deltas = 0;
  let serverTps: number | null = null;
  const decoder = new TextDecoder();
  for await (const chunk of r.body) {
    buf += decoder.decode(chunk as Uint8Array, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
        const d = JSON.parse(line.slice(6)) as {
          choices?: { delta?: { content?: string } }[];
          usage?: { completion_tokens: number };
          timings?: { predicted_per_second?: number };
        };
        if (d.choices?.[0]?.delta?.content) {
          const now = performance.now();
          if (!first) first = now;
          last = now;
          deltas++;
        }
        if (d.usage) tokens = d.usage.completion_tokens;
        if (d.timings?.predicted_per_second) serverTps = d.timings.predicted_per_second;
      }
    }
  }
  const end = performance.now();
  if (!first) throw new Error(`${leg.name}: no content came back`);
  return { tokens: tokens || deltas, totalMs: end - t0, ttftMs: first - t0, decodeMs: last - first, serverTps };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

/** Runs `n` completions on every leg, interleaved, after `warmup` each; returns each leg's samples. */
export async function runLegs(
  legs: Leg[],
  o: { n: number; warmup: number; maxTokens: number },
): Promise<Map<string, Sample[]>> {
  const out = new Map<string, Sample[]>(legs.map((l) => [l.name, []]));
  for (let i = 0; i < o.warmup + o.n; i++) {
    for (const leg of legs) {
      const s = await streamOnce(leg, o.maxTokens, `Request ${i}: write a few words.`);
      if (i >= o.warmup) out.get(leg.name)?.push(s);
    }
  }
  return out;
}

/** The side-by-side table: one row per figure, one column per leg. */
export function report(results: Map<string, Sample[]>): string {
  const legs = [...results.keys()];
  const rows: [string, (s: Sample[]) => string][] = [
    ['completions', (s) => String(s.length)],
    ['tokens per completion (median)', (s) => String(median(s.map((x) => x.tokens)))],
    ['end-to-end tokens/s (median)', (s) => median(s.map((x) => (x.tokens * 1000) / x.totalMs)).toFixed(1)],
    [
      'decode tokens/s, first to last token (median)',
      (s) => median(s.map((x) => ((x.tokens - 1) * 1000) / Math.max(x.decodeMs, 0.001))).toFixed(1),
    ],
    ['time to first token ms (median)', (s) => median(s.map((x) => x.ttftMs)).toFixed(1)],
    ['request ms (median)', (s) => median(s.map((x) => x.totalMs)).toFixed(1)],
    [
      "llama-server's own decode tokens/s (median)",
      (s) => {
        const v = s.map((x) => x.serverTps).filter((x): x is number => x !== null);
        return v.length ? median(v).toFixed(1) : '-';
      },
    ],
  ];
  const w0 = Math.max(...rows.map(([n]) => n.length));
  const cols = legs.map((l) => Math.max(l.length, 10));
  const line = (a: string, cells: string[]): string =>
    `${a.padEnd(w0)}  ${cells.map((c, i) => c.padStart(cols[i] as number)).join('  ')}`;
  return [
    line('', legs),
    ...rows.map(([name, f]) =>
      line(
        name,
        legs.map((l) => f(results.get(l) ?? [])),
      ),
    ),
  ].join('\n');
}

async function main(): Promise<void> {
  const { values: a } = parseArgs({
    options: {
      n: { type: 'string', default: '20' },
      'max-tokens': { type: 'string', default: '64' },
      warmup: { type: 'string', default: '2' },
      gateway: { type: 'string' },
      model: { type: 'string', default: 'tiny-llama' },
      'api-key': { type: 'string' },
      'llama-server': { type: 'string' },
    },
  });
  const o = { n: Number(a.n), warmup: Number(a.warmup), maxTokens: Number(a['max-tokens']) };
  let dir: string | null = null;
  let server: EngineProc | null = null;
  try {
    let direct = a['llama-server'];
    if (!direct) {
      dir = await mkdtemp(join(tmpdir(), 'llmgw-bench-llama-'));
      const model = join(dir, 'tiny.gguf');
      const bytes = await writeTinyLlamaGguf(model);
      server = await startLlamaServer({ model, alias: a.model as string });
      direct = `${server.url}/v1`;
      console.log(`llama-server ${server.url} on the tiny model (${(bytes / 1024).toFixed(0)} KiB GGUF)`);
    }
    const legs: Leg[] = [{ name: 'direct', baseUrl: direct, model: a.model as string }];
    if (a.gateway)
      legs.push({
        name: 'gateway',
        baseUrl: a.gateway,
        model: a.model as string,
        headers: a['api-key'] ? { authorization: `Bearer ${a['api-key']}` } : {},
      });
    console.log(
      `${o.n} streamed completions per leg (after ${o.warmup} warm-up), max_tokens ${o.maxTokens}, sequential, legs interleaved`,
    );
    console.log(report(await runLegs(legs, o)));
  } finally {
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }
}

if (require.main === module) {
  main().catch((e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  });
}
