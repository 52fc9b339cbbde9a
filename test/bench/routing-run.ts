/**
 * `bench:routing`'s runs. The shared-prefix trace: per policy, four fresh sim engines (prefix cache, prefill one
 * prompt at a time) behind a fresh llmgw gateway process, the same Poisson trace sent open-loop, TTFT read from each
 * stream's first token. The long-prompt case: 220 KB chat requests from a closed loop of 150 through the gateway
 * (prefix routing: the costliest pick) to engines that do no work, its added latency from its own histogram.
 */
import { performance } from 'node:perf_hooks';
import { makeTarget, sendOne, type Outcome } from '../../lib/bench/request';
import { summarize } from '../../lib/bench/stats';
import type { RoutingPolicy } from '../../lib/types';
import { parsePromText, valueOf, type Family } from '../helpers/prom-text';
import { startEngine, startLlmgw, startNullEngine, type BenchPath } from './peers-paths';
import { bigBody, makeTrace, type TraceOptions } from './routing-trace';
import { affinityKey, resolveRouting } from '../../gateway/inference/affinity';
import { checkRequest } from '../../gateway/inference/request-check';

/** Everything a run needs; `routingDefaults` are the full benchmark's. */
export interface RoutingBenchOptions extends Omit<TraceOptions, 'model'> {
  replicas: number;
  /** seconds of the trace measured, after warmupS of it */
  durationS: number;
  warmupS: number;
  /** the offered rate as a share of the replicas' prefill capacity with no cache at all */
  load: number;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
  cacheTokens: number;
  slots: number;
  policies: ('round-robin' | RoutingPolicy)[];
  /** the long-prompt case; 0 seconds skips it */
  bigKb: number;
  bigConcurrency: number;
  bigSeconds: number;
  key: string;
}

/** The full benchmark's sizes (issue 21): 32 system prompts of 2k tokens, 4 replicas. */
export const ROUTING_DEFAULTS: Omit<RoutingBenchOptions, 'key'> = {
  systems: 32,
  systemTokens: 2000,
  questionTokens: 60,
  users: 2000,
  zipf: 1,
  maxTokens: 4,
  seed: 1,
  replicas: 4,
  durationS: 40,
  warmupS: 10,
  load: 0.8,
  prefillTokensPerSecond: 10_000,
  decodeTokensPerSecond: 100,
  cacheTokens: 16_384,
  slots: 64,
  policies: ['round-robin', 'least', 'session', 'prefix'],
  bigKb: 220,
  bigConcurrency: 150,
  bigSeconds: 15,
};

/** One policy's figures over the measured part of the trace. */
export interface PolicyRow {
  policy: string;
  sent: number;
  ok: number;
  /** answered 429 or 503 by admission (queue full, queue timeout) */
  shed: number;
  failed: number;
  ttftMeanMs: number;
  ttftP50Ms: number;
  ttftP99Ms: number;
  /** completed requests per second */
  throughput: number;
  /** share of prompt tokens the engines served from their caches */
  cacheHitRate: number;
}

/** The long-prompt case's figures. */
export interface BigRow {
  kb: number;
  concurrency: number;
  ok: number;
  failed: number;
  reqPerS: number;
  clientP50Ms: number;
  clientP99Ms: number;
  /** the gateway's own time per request (llmgw_gateway_added_latency_seconds), interpolated in its buckets */
  addedP50Ms: number;
  addedP99Ms: number;
  /** share of requests whose added time was at most 2 ms */
  addedWithin2Ms: number;
  /** in the bench's own process, ms per body (median): the request check's scan, the affinity key, JSON.parse */
  checkMs: number;
  keyMs: number;
  parseMs: number;
}

const MODEL = 'sim-routing';

/** Cumulative histogram buckets of `name` → the `q` quantile, interpolated within a bucket as Prometheus does. */
function histogramQuantile(before: Map<string, Family>, after: Map<string, Family>, name: string, q: number): number {
  const buckets = (f: Map<string, Family>): Map<number, number> => {
    const m = new Map<number, number>();
    for (const s of f.get(name)?.samples ?? [])
      if (s.name === `${name}_bucket`) m.set(Number(s.labels.le), (m.get(Number(s.labels.le)) ?? 0) + s.value);
    return m;
  };
  const a = buckets(after);
  const b = buckets(before);
  const les = [...a.keys()].sort((x, y) => x - y);
  const counts = les.map((le) => (a.get(le) ?? 0) - (b.get(le) ?? 0));
  const total = counts[counts.length - 1] ?? 0;
  if (total === 0) return Number.NaN;
  const rank = q * total;
  for (let i = 0; i < les.length; i++) {
    if ((counts[i] as number) >= rank) {
      const lo = i === 0 ? 0 : (les[i - 1] as number);
      const hi = les[i] as number;
      if (!Number.isFinite(hi)) return lo;
      const below = i === 0 ? 0 : (counts[i - 1] as number);
      const inBucket = (counts[i] as number) - below;
      return lo + (hi - lo) * (inBucket > 0 ? (rank - below) / inBucket : 0);
    }
  }
  return Number.NaN;
}

const scrapeText = async (url: string): Promise<Map<string, Family>> =>
  parsePromText(await (await fetch(url, { signal: AbortSignal.timeout(10_000) })).text());

/** Stops every path, the last started first. */
async function stopAll(paths: BenchPath[]): Promise<void> {
  for (const p of paths.reverse()) await p.stop();
}

/** The trace through one policy: fresh engines (cold caches) and a fresh gateway. */
async function runPolicy(
  o: RoutingBenchOptions,
  policy: RoutingBenchOptions['policies'][number],
  log: (line: string) => void,
): Promise<PolicyRow> {
  const paths: BenchPath[] = [];
  try {
    const flags = [
      '--prefill-tokens-per-second',
      String(o.prefillTokensPerSecond),
      '--prefix-cache-tokens',
      String(o.cacheTokens),
      '--slots',
      String(o.slots),
    ];
    for (let i = 0; i < o.replicas; i++) paths.push(await startEngine(MODEL, o.decodeTokensPerSecond, o.key, flags));
    const engines = paths.map((p) => p.url);
    const gw = await startLlmgw(engines, MODEL, [o.key], o.key, { policy });
    paths.push(gw);
    // The offered rate: `load` of what the replicas could prefill if nothing were cached.
    const rate = (o.load * o.replicas * o.prefillTokensPerSecond) / (o.systemTokens + o.questionTokens + 2);
    const n = Math.max(1, Math.round(rate * (o.warmupS + o.durationS)));
    const trace = makeTrace({ ...o, model: MODEL }, n, rate);
    const warmEnd = o.warmupS * 1000;
    log(`${policy}: ${n} requests at ${rate.toFixed(1)}/s over ${o.warmupS + o.durationS} s (${o.warmupS} s warm-up)`);
    const target = makeTarget(new URL('/v1/chat/completions', gw.url), o.key, 2048);
    const measured: Outcome[] = [];
    const pending: Promise<void>[] = [];
    const before = new Map<string, Map<string, Family>>();
    const t0 = performance.now();
    let measureStart = 0;
    for (const r of trace) {
      const wait = t0 + r.at - performance.now();
      if (wait > 1) await new Promise((res) => setTimeout(res, wait));
      if (r.at >= warmEnd && measureStart === 0) {
        measureStart = performance.now();
        for (const e of engines) before.set(e, await scrapeText(`${e}/metrics`));
      }
      const counted = r.at >= warmEnd;
      pending.push(sendOne(target, r.body, true, 120_000).then((out) => void (counted && measured.push(out))));
    }
    await Promise.all(pending);
    const elapsedS = (performance.now() - (measureStart || t0)) / 1000;
    target.agent.destroy();
    let q = 0;
    let h = 0;
    for (const e of engines) {
      const a = await scrapeText(`${e}/metrics`);
      const b = before.get(e) ?? new Map<string, Family>();
      q += valueOf(a, 'vllm:prefix_cache_queries_total') - valueOf(b, 'vllm:prefix_cache_queries_total');
      h += valueOf(a, 'vllm:prefix_cache_hits_total') - valueOf(b, 'vllm:prefix_cache_hits_total');
    }
    const ok = measured.filter((x) => x.ok);
    const shed = measured.filter((x) => x.status === 429 || x.status === 503).length;
    const ttft = summarize(ok.map((x) => x.ttft));
    return {
      policy,
      sent: measured.length,
      ok: ok.length,
      shed,
      failed: measured.length - ok.length - shed,
      ttftMeanMs: ttft?.mean ?? Number.NaN,
      ttftP50Ms: ttft?.p50 ?? Number.NaN,
      ttftP99Ms: ttft?.p99 ?? Number.NaN,
      throughput: ok.length / elapsedS,
      cacheHitRate: q > 0 ? h / q : 0,
    };
  } finally {
    await stopAll(paths);
  }
}

/** The median ms of `f` over `runs` calls, after a warm-up. */
function medianMs(f: () => unknown, runs = 300): number {
  for (let i = 0; i < 50; i++) f();
  const t: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    f();
    t.push(performance.now() - t0);
  }
  return t.sort((a, b) => a - b)[runs >> 1] as number;
}

/** What the gateway's own work on one long-prompt body costs, measured here, apart from sockets and load. */
function bodyCosts(body: Buffer): Pick<BigRow, 'checkMs' | 'keyMs' | 'parseMs'> {
  const checked = checkRequest('/v1/chat/completions', body);
  if (checked.kind !== 'ok') throw new Error(`the long prompt fails the request check: ${checked.message}`);
  const how = resolveRouting({ policy: 'prefix' });
  const src = { body, prompt: checked.prompt, headers: {} };
  return {
    checkMs: medianMs(() => checkRequest('/v1/chat/completions', body)),
    keyMs: medianMs(() => affinityKey(how, src)),
    parseMs: medianMs(() => JSON.parse(body.toString('utf8'))),
  };
}

/** The long-prompt case: a closed loop of `bigConcurrency` sending `bigKb` KB prompts for `bigSeconds`. */
async function runBig(o: RoutingBenchOptions, log: (line: string) => void): Promise<BigRow> {
  const paths: BenchPath[] = [];
  try {
    const engine = await startNullEngine(MODEL, o.key);
    paths.push(engine);
    const gw = await startLlmgw(
      Array.from({ length: o.replicas }, () => engine.url),
      MODEL,
      [o.key],
      o.key,
      { policy: 'prefix' },
    );
    paths.push(gw);
    if (!gw.metricsUrl) throw new Error('the gateway printed no metrics URL');
    const body = Buffer.from(bigBody(MODEL, o.bigKb));
    const costs = bodyCosts(body);
    const target = makeTarget(new URL('/v1/chat/completions', gw.url), o.key, o.bigConcurrency);
    log(`${o.bigKb} KB prompts: ${o.bigConcurrency} concurrent for ${o.bigSeconds} s (1 s warm-up)`);
    const loop = async (until: number, out: Outcome[] | null): Promise<void> => {
      while (performance.now() < until) {
        const r = await sendOne(target, body, false, 60_000);
        out?.push(r);
      }
    };
    const warm = performance.now() + 1000;
    await Promise.all(Array.from({ length: o.bigConcurrency }, () => loop(warm, null)));
    const before = await scrapeText(gw.metricsUrl);
    const outs: Outcome[] = [];
    const t0 = performance.now();
    await Promise.all(Array.from({ length: o.bigConcurrency }, () => loop(t0 + o.bigSeconds * 1000, outs)));
    const elapsedS = (performance.now() - t0) / 1000;
    const after = await scrapeText(gw.metricsUrl);
    target.agent.destroy();
    const name = 'llmgw_gateway_added_latency_seconds';
    const ok = outs.filter((x) => x.ok);
    const lat = summarize(ok.map((x) => x.total));
    const le2 = (f: Map<string, Family>): number => valueOf(f, `${name}_bucket`, { le: '0.002' });
    const count = valueOf(after, `${name}_count`) - valueOf(before, `${name}_count`);
    return {
      kb: o.bigKb,
      concurrency: o.bigConcurrency,
      ok: ok.length,
      failed: outs.length - ok.length,
      reqPerS: ok.length / elapsedS,
      clientP50Ms: lat?.p50 ?? Number.NaN,
      clientP99Ms: lat?.p99 ?? Number.NaN,
      addedP50Ms: histogramQuantile(before, after, name, 0.5) * 1000,
      addedP99Ms: histogramQuantile(before, after, name, 0.99) * 1000,
      addedWithin2Ms: count > 0 ? (le2(after) - le2(before)) / count : Number.NaN,
      ...costs,
    };
  } finally {
    await stopAll(paths);
  }
}

/** Runs every policy over the trace, then the long-prompt case; `log` hears progress. */
export async function runRoutingBench(
  o: RoutingBenchOptions,
  log: (line: string) => void = () => undefined,
): Promise<{ rows: PolicyRow[]; big: BigRow | null }> {
  const rows: PolicyRow[] = [];
  for (const p of o.policies) rows.push(await runPolicy(o, p, log));
  const big = o.bigSeconds > 0 ? await runBig(o, log) : null;
  return { rows, big };
}

const f = (x: number, d = 1): string => (Number.isFinite(x) ? x.toFixed(d) : '-');

/** The figures as markdown tables, and the goals judged against them. */
export function routingReport(o: RoutingBenchOptions, r: { rows: PolicyRow[]; big: BigRow | null }): string {
  const lines = !r.rows.length
    ? []
    : [
        `${o.systems} system prompts × ${o.systemTokens} tokens, Zipf ${o.zipf}, ${o.users} users, ${o.replicas} sim replicas ` +
          `(prefill ${o.prefillTokensPerSecond} tokens/s one prompt at a time, cache ${o.cacheTokens} tokens, decode ${o.decodeTokensPerSecond} tokens/s), ` +
          `offered ${Math.round(o.load * 100)} % of the cacheless prefill capacity, ${o.durationS} s measured after ${o.warmupS} s`,
        '',
        '| routing | sent | ok | shed | failed | TTFT mean ms | TTFT p50 ms | TTFT p99 ms | throughput req/s | cache hit |',
        '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
        ...r.rows.map(
          (x) =>
            `| ${x.policy} | ${x.sent} | ${x.ok} | ${x.shed} | ${x.failed} | ${f(x.ttftMeanMs)} | ${f(x.ttftP50Ms)} | ${f(x.ttftP99Ms)} | ${f(x.throughput)} | ${f(x.cacheHitRate * 100, 0)} % |`,
        ),
      ];
  const by = new Map(r.rows.map((x) => [x.policy, x]));
  const rr = by.get('round-robin');
  const least = by.get('least');
  for (const p of ['session', 'prefix']) {
    const x = by.get(p);
    if (!x) continue;
    const goals: string[] = [];
    if (rr) goals.push(`mean TTFT ${f(rr.ttftMeanMs / x.ttftMeanMs, 2)}× better than round robin (goal ≥ 2×)`);
    if (least) goals.push(`p99 ${f(x.ttftP99Ms)} ms vs least-outstanding ${f(least.ttftP99Ms)} ms (goal: no worse)`);
    goals.push(`${x.shed} shed (goal 0)`);
    lines.push('', `${p}: ${goals.join('; ')}`);
  }
  if (r.big) {
    const b = r.big;
    lines.push(
      ...(lines.length ? [''] : []),
      `| ${b.kb} KB prompts | concurrent | ok | failed | req/s | client p50 ms | client p99 ms | gateway added p50 ms | added p99 ms | added ≤ 2 ms |`,
      '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
      `| prefix routing | ${b.concurrency} | ${b.ok} | ${b.failed} | ${f(b.reqPerS, 0)} | ${f(b.clientP50Ms)} | ${f(b.clientP99Ms)} | ${f(b.addedP50Ms, 2)} | ${f(b.addedP99Ms, 2)} | ${f(b.addedWithin2Ms * 100, 1)} % |`,
      '',
      `per body, in the bench's process (median): request check ${f(b.checkMs, 3)} ms, affinity key ${f(b.keyMs, 3)} ms; JSON.parse would take ${f(b.parseMs, 3)} ms`,
      '',
      `goals: added p99 ≤ 2 ms (${f(b.addedP99Ms, 2)} ms), ≥ 1,000 req/s (${f(b.reqPerS, 0)})`,
    );
  }
  return lines.join('\n');
}
