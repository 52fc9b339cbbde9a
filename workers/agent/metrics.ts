/**
 * The node agent's Prometheus series (docs/metrics.md), on its --metrics listener: the engines it offers by state,
 * the engine processes it supervises, their starts and exits (a replica's rebuild is an exit, then a start), and
 * weights: bytes fetched and bytes held in --weights-dir. Counts come from the agent's own log lines (the shard
 * and weights activities already say each event once, with its fields); states are read on scrape.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { EngineStatus } from '../../lib/types';

type Log = (msg: string, fields?: Record<string, unknown>) => void;

/** What the series are read from, set once the agent has built it. */
export interface AgentMetricsSources {
  engines?: () => EngineStatus[];
  supervised?: Set<string>;
  weightsDir?: string;
}

/** How long one walk of the weights directory answers scrapes. */
const DU_CACHE_MS = 30_000;

/** Bytes of the regular files under `dir` (0 when it does not exist). */
async function bytesUnder(dir: string): Promise<number> {
  let total = 0;
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) total += await bytesUnder(p);
    else if (e.isFile()) total += (await stat(p).catch(() => ({ size: 0 }))).size;
  }
  return total;
}

/** The agent's registry; `sources` is filled in as the agent starts. */
export function agentMetrics(): { registry: Registry; sources: AgentMetricsSources; countingLog(log: Log): Log } {
  const registry = new Registry();
  const sources: AgentMetricsSources = {};
  new Gauge({
    name: 'llmgw_agent_engines',
    help: 'Engines this node was asked to run, by engine and state (offered, failed, skipped): 1 per engine',
    labelNames: ['engine', 'state'],
    registers: [registry],
    collect(): void {
      this.reset();
      for (const s of sources.engines?.() ?? []) this.set({ engine: s.engine, state: s.state }, 1);
    },
  });
  new Gauge({
    name: 'llmgw_agent_engine_processes',
    help: 'Engine processes (shards) this agent supervises now',
    registers: [registry],
    collect(): void {
      this.set(sources.supervised?.size ?? 0);
    },
  });
  const starts = new Counter({
    name: 'llmgw_agent_engine_starts_total',
    help: 'Engine processes started (a start after an exit is a restart) or adopted from a previous agent, by how',
    labelNames: ['how'],
    registers: [registry],
  });
  const exits = new Counter({
    name: 'llmgw_agent_engine_exits_total',
    help: 'Engine processes that exited on their own (the replica rebuilds them)',
    registers: [registry],
  });
  const fetched = new Counter({
    name: 'llmgw_agent_weights_fetched_bytes_total',
    help: 'Weights bytes transferred to this node (from peers or the origin)',
    registers: [registry],
  });
  let du = { at: 0, bytes: 0 };
  new Gauge({
    name: 'llmgw_agent_weights_bytes',
    help: 'Bytes held in the weights cache (--weights-dir), read at most every 30 s',
    registers: [registry],
    async collect(): Promise<void> {
      if (!sources.weightsDir) return;
      if (Date.now() - du.at >= DU_CACHE_MS) du = { at: Date.now(), bytes: await bytesUnder(sources.weightsDir) };
      this.set(du.bytes);
    },
  });
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    sources,
    countingLog: (log) => (msg, fields) => {
      if (msg === 'shard started') starts.inc({ how: 'started' });
      else if (msg === 'shard adopted') starts.inc({ how: 'adopted' });
      else if (msg === 'shard exited') exits.inc();
      else if (msg === 'weights fetched') fetched.inc(Number(fields?.transferred ?? 0) || 0);
      log(msg, fields);
    },
  };
}
