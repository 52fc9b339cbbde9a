/**
 * npm run bench:peers — what each proxy adds in front of one sim engine, measured in one run on this machine:
 * direct, nginx, a bare Node proxy (the floor for any Node proxy), llmgw's gateway, and LiteLLM where python3 can
 * import it. Phases: interleaved non-streamed rounds (added p50/p99, paired per round, bootstrap 95 % intervals),
 * interleaved streams (added time to the first byte), CPU per request of each proxy process under a closed-loop
 * load (`llmgw bench`, two passes, the second in reverse order), and `llmgw bench` through llmgw for the
 * throughput goal. Prints markdown tables. A benchmark, not a test: it prints figures and asserts nothing.
 * Options: npm run bench:peers -- --help
 */
import { newApiKey } from '../../lib/api-keys';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { parse } from '../../cli/args';
import { requestBodies } from '../../lib/bench/prompt';
import { makeTarget, sendOne, type Target } from '../../lib/bench/request';
import type { BenchReport } from '../../lib/bench/run';
import { seededRandom } from '../../lib/random';
import {
  startBareNode,
  startEngine,
  startLitellm,
  startLlmgw,
  startNginx,
  treeCpuSeconds,
  type BenchPath,
  type SkippedPath,
} from './peers-paths';
import { ownTime, peersReport, readHistogram, type CpuFigures, type Histogram, type Rounds } from './peers-report';

const USAGE = `
npm run bench:peers -- [options]

  --rounds N                 interleaved non-streamed rounds, one request per path each (default 1000)
  --streams N                interleaved streamed rounds (default 200)
  --cpu-seconds S            each path's CPU run, twice (default 10)
  --cpu-concurrency N        connections of the CPU runs (default 32)
  --throughput-seconds S     the llmgw throughput run; 0 skips it (default 60)
  --throughput-concurrency N (default 64)
  --tokens-per-second N      the sim engine's pace (default 200: one token per 5 ms)
  --api-key KEY              the key llmgw checks, sent as the bearer on every path (default $LLMGW_BENCH_API_KEY,
                             else a new one; llmgw holds it as a stored key with rpm and tpm quotas)
`;

const MODEL = 'sim-peers';
const LLMGW = resolve(__dirname, '../../bin/llmgw.js');
const run = promisify(execFile);

const load = (): string =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(', ');

/** Interleaved rounds: each round sends one request to every path, in a fresh random order; per path, one figure per round (NaN if it failed). */
async function rounds(
  paths: BenchPath[],
  targets: Map<string, Target>,
  n: number,
  stream: boolean,
  seed: number,
  pick: (o: Awaited<ReturnType<typeof sendOne>>) => number[],
): Promise<Rounds> {
  const body = requestBodies({ model: MODEL, promptTokens: 1, maxTokens: stream ? 16 : 1, stream });
  const rnd = seededRandom(seed);
  const by = new Map(paths.map((p) => [p.name, [] as number[][]]));
  const failed = new Map(paths.map((p) => [p.name, 0]));
  for (let i = 0; i < n; i++) {
    const order = [...paths];
    for (let j = order.length - 1; j > 0; j--) {
      const k = Math.floor(rnd() * (j + 1));
      [order[j], order[k]] = [order[k] as BenchPath, order[j] as BenchPath];
    }
    for (const p of order) {
      const o = await sendOne(targets.get(p.name) as Target, body(i), stream, 30_000);
      if (!o.ok) failed.set(p.name, (failed.get(p.name) ?? 0) + 1);
      by.get(p.name)?.push(o.ok ? pick(o) : pick(o).map(() => Number.NaN));
    }
  }
  return { by, failed };
}

/** One `llmgw bench` run (non-streamed, one-token answers) against `url`; the proxy's and the engine's CPU seconds over it. */
async function loadRun(
  url: string,
  seconds: number,
  concurrency: number,
  key: string,
  pids: { proxy: number | null; engine: number },
): Promise<{ report: BenchReport; proxyCpuS: number; engineCpuS: number }> {
  const args = [
    LLMGW,
    'bench',
    url,
    '--model',
    MODEL,
    '--api-key',
    key,
    '--duration',
    String(seconds),
    '--concurrency',
    String(concurrency),
    '--prompt-tokens',
    '1',
    '--max-tokens',
    '1',
    '--json',
    '--quiet',
  ];
  const cpu = (): [number, number] => [pids.proxy ? treeCpuSeconds(pids.proxy) : 0, treeCpuSeconds(pids.engine)];
  const before = cpu();
  // Exit status 1 means some requests failed: the report says which, so it is read all the same.
  const out = await run(process.execPath, args, { maxBuffer: 1 << 24 }).catch(
    (err: { stdout?: string; stderr?: string }) => ({ stdout: err.stdout ?? '', stderr: err.stderr ?? '' }),
  );
  const after = cpu();
  if (!out.stdout.trim()) throw new Error(`llmgw bench ${url} printed no report: ${out.stderr.trim()}`);
  return {
    report: JSON.parse(out.stdout) as BenchReport,
    proxyCpuS: after[0] - before[0],
    engineCpuS: after[1] - before[1],
  };
}

async function main(): Promise<void> {
  const { values } = parse(process.argv.slice(2), {
    usage: USAGE,
    options: {
      rounds: { type: 'string' },
      streams: { type: 'string' },
      'cpu-seconds': { type: 'string' },
      'cpu-concurrency': { type: 'string' },
      'throughput-seconds': { type: 'string' },
      'throughput-concurrency': { type: 'string' },
      'tokens-per-second': { type: 'string' },
      'api-key': { type: 'string' },
    },
  });
  const num = (v: string | undefined, d: number): number => (v === undefined ? d : Number(v));
  const o = {
    rounds: num(values.rounds, 1000),
    streams: num(values.streams, 200),
    cpuS: num(values['cpu-seconds'], 10),
    cpuC: num(values['cpu-concurrency'], 32),
    tputS: num(values['throughput-seconds'], 60),
    tputC: num(values['throughput-concurrency'], 64),
    tps: num(values['tokens-per-second'], 200),
    key: values['api-key'] ?? (process.env.LLMGW_BENCH_API_KEY || newApiKey()),
  };
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-peers-'));
  const loads: string[] = [`start ${load()}`];
  const started: BenchPath[] = [];
  const skipped: SkippedPath[] = [];
  const say = (s: string): void => void process.stderr.write(`${s}\n`);
  try {
    const engine = await startEngine(MODEL, o.tps, o.key);
    started.push(engine);
    started.push(await startBareNode(engine.url, MODEL, o.key));
    started.push(await startLlmgw(engine.url, MODEL, [o.key], o.key));
    for (const peer of [
      await startNginx(engine.url, dir, MODEL, o.key),
      await startLitellm(engine.url, dir, MODEL, o.key),
    ]) {
      if ('skipped' in peer) skipped.push(peer);
      else started.push(peer);
    }
    const order = ['direct', 'nginx', 'bare Node', 'llmgw', 'LiteLLM'];
    const paths = order.map((n) => started.find((p) => p.name === n)).filter((p): p is BenchPath => Boolean(p));
    const targets = new Map(paths.map((p) => [p.name, makeTarget(new URL(`${p.url}/v1/chat/completions`), o.key, 1)]));
    say(
      `paths: ${paths.map((p) => p.name).join(', ')}${skipped.length ? `; skipped: ${skipped.map((s) => s.name).join(', ')}` : ''}`,
    );

    say(`warm-up, then ${o.rounds} interleaved non-streamed rounds …`);
    await rounds(paths, targets, 100, false, 1, (r) => [r.total]);
    const llmgwMetrics = paths.find((p) => p.name === 'llmgw')?.metricsUrl;
    const ownNow = async (): Promise<Histogram | null> =>
      llmgwMetrics
        ? readHistogram(await (await fetch(llmgwMetrics)).text(), 'llmgw_gateway_added_latency_seconds')
        : null;
    const ownBefore = await ownNow();
    const lat = await rounds(paths, targets, o.rounds, false, 2, (r) => [r.total]);
    const ownAfter = await ownNow();
    const own = ownBefore && ownAfter ? ownTime(ownBefore, ownAfter) : null;
    loads.push(`after the non-streamed rounds ${load()}`);
    say(`${o.streams} interleaved streamed rounds …`);
    await rounds(paths, targets, 10, true, 3, (r) => [r.ttfb]);
    const st = await rounds(paths, targets, o.streams, true, 4, (r) => [r.ttfb, r.ttft, r.total]);
    loads.push(`after the streams ${load()}`);
    for (const t of targets.values()) t.agent.destroy();

    say(`CPU runs: ${o.cpuS} s per path at c=${o.cpuC}, two passes …`);
    const cpu = new Map<string, CpuFigures>();
    for (const pass of [paths, [...paths].reverse()]) {
      for (const p of pass) {
        const pids = { proxy: p.pid === engine.pid ? null : p.pid, engine: engine.pid as number };
        await loadRun(p.url, 3, o.cpuC, o.key, pids); // warm-up
        const r = await loadRun(p.url, o.cpuS, o.cpuC, o.key, pids);
        const c = cpu.get(p.name) ?? { rps: [], p50: [], p99: [], proxyUs: [], engineUs: [], clientPct: [], failed: 0 };
        const n = Math.max(1, r.report.requests.sent);
        c.rps.push(r.report.requestsPerS);
        c.p50.push(r.report.latencyMs?.p50 ?? Number.NaN);
        c.p99.push(r.report.latencyMs?.p99 ?? Number.NaN);
        c.proxyUs.push((r.proxyCpuS / n) * 1e6);
        c.engineUs.push((r.engineCpuS / n) * 1e6);
        c.clientPct.push((r.report.clientCpuS / r.report.durationS) * 100);
        c.failed += r.report.requests.failed;
        cpu.set(p.name, c);
        say(
          `  ${p.name}: ${r.report.requestsPerS.toFixed(0)} req/s, proxy ${((r.proxyCpuS / n) * 1e6).toFixed(1)} µs/req`,
        );
      }
    }
    loads.push(`after the CPU runs ${load()}`);

    let tput: { report: BenchReport; proxyCpuS: number } | null = null;
    const gw = paths.find((p) => p.name === 'llmgw') as BenchPath;
    if (o.tputS > 0) {
      say(`throughput: llmgw bench through llmgw, c=${o.tputC}, ${o.tputS} s …`);
      tput = await loadRun(gw.url, o.tputS, o.tputC, o.key, { proxy: gw.pid, engine: engine.pid as number });
      loads.push(`after the throughput run ${load()}`);
    }

    process.stdout.write(
      `${peersReport({ settings: o, paths, skipped, latency: lat, streams: st, cpu, throughput: tput, loads, own })}\n`,
    );
  } finally {
    for (const p of started.reverse()) await p.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: Error) => {
  process.stderr.write(`bench:peers failed: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
