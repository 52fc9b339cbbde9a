/**
 * The load generator behind `llmgw bench`: `concurrency` closed loops sending chat completions to one
 * OpenAI-compatible URL until N requests or S seconds, then a report of latency, TTFT, inter-token latency,
 * throughput and goodput. The numbers are pure functions of the outcomes (`reportOf`), so they are tested without I/O.
 */
import { performance } from 'node:perf_hooks';
import { requestBodies } from './prompt';
import { makeTarget, sendOne, type Outcome } from './request';
import { summarize, type Summary } from './stats';

/** What to send, where, and how long. */
export interface BenchOptions {
  /** The chat completions URL (`completionsUrl` makes it from a base URL) */
  url: URL;
  model: string;
  apiKey?: string;
  concurrency: number;
  /** Stop after this many requests (or `durationS`) */
  requests: number | null;
  durationS: number | null;
  stream: boolean;
  promptTokens: number;
  maxTokens: number;
  ignoreEos: boolean;
  /** A request that receives nothing for this long fails as a timeout */
  timeoutMs: number;
  /** Requests sent first and left out of the figures (connections, JIT, caches) */
  warmup: number;
  /** Goodput counts the completed requests whose first token came within this */
  ttftBudgetMs: number;
}

/** Where a run is, for a progress line. */
export interface BenchProgress {
  done: number;
  ok: number;
  failed: number;
  elapsedS: number;
  /** The request count or the duration the run stops at */
  goal: { requests: number } | { seconds: number };
  warmingUp: boolean;
}

/** Failures of one kind: how many, and the first few messages. */
export interface ErrorKind {
  kind: string;
  count: number;
  first: string[];
}

/** What a run measured. Times in ms; rates per second of the measured phase (warm-up left out). */
export interface BenchReport {
  url: string;
  model: string;
  stream: boolean;
  concurrency: number;
  promptTokens: number;
  maxTokens: number;
  requests: { sent: number; ok: number; failed: number };
  durationS: number;
  /** Completed (successful) requests per second */
  requestsPerS: number;
  tokens: { prompt: number; completion: number; completionPerS: number; promptPerS: number };
  /** Time to the first token: a stream's first token event, a whole answer's end when not streamed */
  ttftMs: Summary | null;
  /** Gaps between a stream's token events (null when not streamed) */
  itlMs: Summary | null;
  latencyMs: Summary | null;
  goodput: { ttftBudgetMs: number; requests: number; perS: number; shareOfOk: number };
  errors: ErrorKind[];
  /** CPU seconds the load generator itself used: near one core means it, not the server, was the limit */
  clientCpuS: number;
}

/** The raw figures a run collects, one entry per finished request. */
export interface Tally {
  ok: number;
  failed: number;
  ttft: number[];
  latency: number[];
  gaps: number[];
  promptTokens: number;
  completionTokens: number;
  errors: Map<string, ErrorKind>;
}

const FIRST_ERRORS = 3;

/** An empty tally. */
export function newTally(): Tally {
  return { ok: 0, failed: 0, ttft: [], latency: [], gaps: [], promptTokens: 0, completionTokens: 0, errors: new Map() };
}

/** Adds one outcome to a tally. */
export function record(t: Tally, o: Outcome): void {
  if (!o.ok) {
    t.failed++;
    const kind = o.kind ?? 'failed';
    let e = t.errors.get(kind);
    if (!e) t.errors.set(kind, (e = { kind, count: 0, first: [] }));
    e.count++;
    if (e.first.length < FIRST_ERRORS && o.message) e.first.push(o.message);
    return;
  }
  t.ok++;
  t.ttft.push(o.ttft);
  t.latency.push(o.total);
  for (const g of o.gaps) t.gaps.push(g);
  t.promptTokens += o.promptTokens;
  t.completionTokens += o.completionTokens;
}

/** The report of a tally gathered over `durationS` seconds. */
export function reportOf(o: BenchOptions, t: Tally, durationS: number, clientCpuS: number): BenchReport {
  const per = (x: number): number => (durationS > 0 ? x / durationS : 0);
  let within = 0;
  for (const x of t.ttft) if (x <= o.ttftBudgetMs) within++;
  return {
    url: o.url.href,
    model: o.model,
    stream: o.stream,
    concurrency: o.concurrency,
    promptTokens: o.promptTokens,
    maxTokens: o.maxTokens,
    requests: { sent: t.ok + t.failed, ok: t.ok, failed: t.failed },
    durationS,
    requestsPerS: per(t.ok),
    tokens: {
      prompt: t.promptTokens,
      completion: t.completionTokens,
      completionPerS: per(t.completionTokens),
      promptPerS: per(t.promptTokens),
    },
    ttftMs: summarize(t.ttft),
    itlMs: o.stream ? summarize(t.gaps) : null,
    latencyMs: summarize(t.latency),
    goodput: { ttftBudgetMs: o.ttftBudgetMs, requests: within, perS: per(within), shareOfOk: t.ok ? within / t.ok : 0 },
    errors: [...t.errors.values()].sort((a, b) => b.count - a.count),
    clientCpuS,
  };
}

/** The chat completions URL of a base URL: `http://h:8080`, `…/v1` and `…/v1/chat/completions` all work. */
export function completionsUrl(base: string): URL {
  const u = new URL(base);
  const path = u.pathname.replace(/\/+$/, '');
  if (!path.endsWith('/chat/completions'))
    u.pathname = `${path.endsWith('/v1') ? path : `${path}/v1`}/chat/completions`;
  return u;
}

/** The models URL beside a completions URL. */
export function modelsUrl(completions: URL): URL {
  const u = new URL(completions.href);
  u.pathname = u.pathname.replace(/\/chat\/completions$/, '/models');
  return u;
}

/** A run under way: where it is, and its report once the last request is back. */
export interface BenchRun {
  progress(): BenchProgress;
  report: Promise<BenchReport>;
}

/** Starts a run: the warm-up, then the measured requests, each loop sending its next request when its last one is back. */
export function startBench(o: BenchOptions): BenchRun {
  const target = makeTarget(o.url, o.apiKey, o.concurrency);
  const bodyOf = requestBodies(o);
  const goal = o.requests !== null ? { requests: o.requests } : { seconds: o.durationS ?? 0 };
  let tally = newTally();
  let n = 0;
  let warmingUp = o.warmup > 0;
  let started = performance.now();
  const loops = async (more: () => boolean): Promise<void> => {
    const loop = async (): Promise<void> => {
      while (more()) record(tally, await sendOne(target, bodyOf(n++), o.stream, o.timeoutMs));
    };
    await Promise.all(Array.from({ length: o.concurrency }, loop));
  };
  const run = async (): Promise<BenchReport> => {
    try {
      if (o.warmup > 0) {
        await loops(() => n < o.warmup);
        tally = newTally();
        warmingUp = false;
      }
      const first = n;
      started = performance.now();
      const cpu0 = process.cpuUsage();
      const deadline = started + (o.durationS ?? 0) * 1000;
      await loops(o.requests !== null ? () => n - first < (o.requests ?? 0) : () => performance.now() < deadline);
      const cpu = process.cpuUsage(cpu0);
      return reportOf(o, tally, (performance.now() - started) / 1000, (cpu.user + cpu.system) / 1e6);
    } finally {
      target.agent.destroy();
    }
  };
  return {
    progress: () => ({
      done: tally.ok + tally.failed,
      ok: tally.ok,
      failed: tally.failed,
      elapsedS: (performance.now() - started) / 1000,
      goal,
      warmingUp,
    }),
    report: run(),
  };
}
