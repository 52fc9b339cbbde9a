/**
 * npm run bench:routing — what cache-aware routing gains on traffic that shares long prefixes, and what it costs:
 * a shared-prefix trace against sim replicas behind llmgw's gateway for round robin, least-outstanding and each
 * affinity level (mean/p99 TTFT, throughput, requests shed, the engines' cache hit rate), then 220 KB prompts at 150
 * concurrent requests (the gateway's added latency, req/s). Prints markdown tables; a benchmark, it asserts nothing.
 * Options: npm run bench:routing -- --help
 */
import { newApiKey } from '../../lib/api-keys';
import { loadavg } from 'node:os';
import { parse } from '../../cli/args';
import { ROUTING_POLICIES } from '../../lib/types';
import { ROUTING_DEFAULTS, routingReport, runRoutingBench, type RoutingBenchOptions } from './routing-run';

const d = ROUTING_DEFAULTS;
const USAGE = `
npm run bench:routing -- [options]

  The shared-prefix trace (each policy: fresh sim engines and a fresh gateway, the same requests at the same times):
  --systems N              distinct system prompts (default ${d.systems})
  --system-tokens N        words (sim tokens) in each (default ${d.systemTokens})
  --users N                users, each keeping one system prompt (default ${d.users})
  --zipf S                 popularity exponent of the system prompts (default ${d.zipf})
  --replicas N             sim engines (default ${d.replicas})
  --load X                 offered rate as a share of the replicas' prefill capacity with nothing cached (default ${d.load})
  --duration S             seconds measured (default ${d.durationS}), after --warmup S (default ${d.warmupS})
  --prefill N              each engine's prefill, tokens/s, one prompt at a time (default ${d.prefillTokensPerSecond})
  --cache-tokens N         each engine's prefix cache (default ${d.cacheTokens}: 8 of the 2k-token prompts)
  --policies a,b           any of round-robin, least, session, prefix (default all; --policies none: only the
                           long-prompt case)
  The long-prompt case (engines that do no work, prefix routing):
  --big-kb N               prompt size (default ${d.bigKb}); --big-concurrency N (default ${d.bigConcurrency});
  --big-seconds S          (default ${d.bigSeconds}; 0 skips it)
`;

async function main(): Promise<void> {
  const { values: v } = parse(process.argv.slice(2), {
    usage: USAGE,
    options: Object.fromEntries(
      [
        'systems',
        'system-tokens',
        'users',
        'zipf',
        'replicas',
        'load',
        'duration',
        'warmup',
        'prefill',
        'cache-tokens',
        'policies',
        'big-kb',
        'big-concurrency',
        'big-seconds',
      ].map((k) => [k, { type: 'string' as const }]),
    ),
  });
  const num = (k: string, fallback: number): number => {
    const raw = v[k as keyof typeof v];
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${k}: expected a number >= 0, got ${JSON.stringify(raw)}`);
    return n;
  };
  const list = v.policies ?? d.policies.join(',');
  const policies = list === 'none' ? [] : list.split(',').map((p) => p.trim());
  for (const p of policies)
    if (!ROUTING_POLICIES.includes(p as never))
      throw new Error(`--policies: ${JSON.stringify(p)} is not one of ${ROUTING_POLICIES.join(', ')}`);
  const o: RoutingBenchOptions = {
    ...d,
    systems: num('systems', d.systems),
    systemTokens: num('system-tokens', d.systemTokens),
    users: num('users', d.users),
    zipf: num('zipf', d.zipf),
    replicas: num('replicas', d.replicas),
    load: num('load', d.load),
    durationS: num('duration', d.durationS),
    warmupS: num('warmup', d.warmupS),
    prefillTokensPerSecond: num('prefill', d.prefillTokensPerSecond),
    cacheTokens: num('cache-tokens', d.cacheTokens),
    policies: policies as RoutingBenchOptions['policies'],
    bigKb: num('big-kb', d.bigKb),
    bigConcurrency: num('big-concurrency', d.bigConcurrency),
    bigSeconds: num('big-seconds', d.bigSeconds),
    key: newApiKey(),
  };
  const log = (line: string): void => void process.stderr.write(`bench:routing: ${line}\n`);
  log(
    `load average before: ${loadavg()
      .map((x) => x.toFixed(2))
      .join(', ')}`,
  );
  const r = await runRoutingBench(o, log);
  log(
    `load average after: ${loadavg()
      .map((x) => x.toFixed(2))
      .join(', ')}`,
  );
  process.stdout.write(`${routingReport(o, r)}\n`);
}

main().catch((err: Error) => {
  process.stderr.write(`bench:routing: ${err.message}\n`);
  process.exit(1);
});
