/**
 * Engine load signals: how many requests an engine holds waiting for their turn and how full its KV cache is, read
 * from its own Prometheus `/metrics` by the names each engine's source uses (checked against them):
 * - vLLM: `vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:kv_cache_usage_perc` (v1; v0 and before
 *   0.10 `vllm:gpu_cache_usage_perc`). Served without a flag.
 * - SGLang: `sglang:num_queue_reqs`, `sglang:num_running_reqs`, `sglang:token_usage` (needs `--enable-metrics`).
 * - llama.cpp: `llamacpp:requests_deferred`, `llamacpp:requests_processing`, and `llamacpp:kv_cache_usage_ratio`
 *   where the build still exports it (needs `--metrics`).
 * - sim: vLLM's names (lib/sim/server.ts), so it is read exactly as vLLM is.
 */
import type { EngineName } from '../types';

/** One engine's load as it reported it. */
export interface EngineSignal {
  /** Requests the engine holds that have not started (queued, deferred, waiting for prefill) */
  waiting: number;
  /** Requests it is working on, or null when it does not say */
  running: number | null;
  /** Share of its KV cache in use, 0..1, or null when it does not say */
  kvUsage: number | null;
}

/** The metric names each engine reports its signals by. */
const NAMES: Record<EngineName, { waiting: string; running: string; kv: string[] }> = {
  vllm: {
    waiting: 'vllm:num_requests_waiting',
    running: 'vllm:num_requests_running',
    kv: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
  },
  sim: {
    waiting: 'vllm:num_requests_waiting',
    running: 'vllm:num_requests_running',
    kv: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
  },
  sglang: { waiting: 'sglang:num_queue_reqs', running: 'sglang:num_running_reqs', kv: ['sglang:token_usage'] },
  llamacpp: {
    waiting: 'llamacpp:requests_deferred',
    running: 'llamacpp:requests_processing',
    kv: ['llamacpp:kv_cache_usage_ratio'],
  },
};

/** What the node activities tell the agent's signal gatherer: a rank 0 engine started serving here, or stopped. */
export interface SignalTargets {
  track(replicaId: string, engine: EngineName, baseUrl: string): void;
  untrack(replicaId: string, baseUrl: string): void;
}

/** The path an engine's signals are read from. */
export const SIGNALS_PATH = '/metrics';

/**
 * Reads `engine`'s signals from its Prometheus text: counts summed over label sets (one per model or rank), the
 * cache share the largest. Null when the text lacks the waiting count (not this engine, or metrics are off).
 */
export function parseSignals(engine: EngineName, text: string): EngineSignal | null {
  const names = NAMES[engine];
  const wanted = new Set([names.waiting, names.running, ...names.kv]);
  const sums = new Map<string, number>();
  const maxes = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.length === 0 || line.charCodeAt(0) === 35 /* # */) continue;
    const brace = line.indexOf('{');
    const space = line.indexOf(' ');
    const end = brace >= 0 && (space < 0 || brace < space) ? brace : space;
    if (end <= 0) continue;
    const name = line.slice(0, end);
    if (!wanted.has(name)) continue;
    // The value follows the labels (whose strings may hold spaces): the first field after the closing brace.
    const rest = brace === end ? line.slice(line.lastIndexOf('}') + 1) : line.slice(end);
    const value = Number(rest.trim().split(/\s+/)[0]);
    if (!Number.isFinite(value)) continue;
    sums.set(name, (sums.get(name) ?? 0) + value);
    maxes.set(name, Math.max(maxes.get(name) ?? -Infinity, value));
  }
  const waiting = sums.get(names.waiting);
  if (waiting === undefined) return null;
  const kvName = names.kv.find((n) => maxes.has(n));
  const kv = kvName === undefined ? null : (maxes.get(kvName) as number);
  return {
    waiting: Math.max(0, waiting),
    running: sums.get(names.running) ?? null,
    kvUsage: kv === null ? null : Math.min(1, Math.max(0, kv)),
  };
}

/** The flag an engine needs to serve `/metrics`, or null when it serves it anyway. */
export function metricsFlag(engine: EngineName): string | null {
  return engine === 'llamacpp' ? '--metrics' : engine === 'sglang' ? '--enable-metrics' : null;
}

/**
 * The signals of whichever engine's names `text` holds: the node's door knows an engine by its port alone (engine
 * records name no engine), and the engines' metric names do not overlap (sim's are vLLM's).
 */
export function parseAnySignals(text: string): EngineSignal | null {
  for (const engine of ['vllm', 'sglang', 'llamacpp'] as const) {
    const s = parseSignals(engine, text);
    if (s) return s;
  }
  return null;
}
