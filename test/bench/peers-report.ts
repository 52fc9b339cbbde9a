/** The markdown report of `npm run bench:peers`: what it measured, per path, and the issue-20 goals beside the figures. */
import { parsePromText } from '../helpers/prom-text';
import { cpus } from 'node:os';
import type { BenchReport } from '../../lib/bench/run';
import { medianCi95, pairedDifferences, quantile } from '../../lib/bench/stats';
import type { SkippedPath } from './peers-paths';

/** Interleaved rounds: per path, one row per round of figures (NaN where the request failed), and the failures. */
export interface Rounds {
  by: Map<string, number[][]>;
  failed: Map<string, number>;
}

/** A path's CPU runs, one entry per pass. */
export interface CpuFigures {
  rps: number[];
  p50: number[];
  p99: number[];
  proxyUs: number[];
  engineUs: number[];
  clientPct: number[];
  failed: number;
}

/** Everything one run measured. */
export interface PeersResult {
  settings: { rounds: number; streams: number; cpuS: number; cpuC: number; tputS: number; tputC: number; tps: number };
  paths: { name: string; about: string }[];
  skipped: SkippedPath[];
  /** Per round: [ms from sent to body read] */
  latency: Rounds;
  /** Per round: [first byte, first token, end] in ms */
  streams: Rounds;
  cpu: Map<string, CpuFigures>;
  throughput: { report: BenchReport; proxyCpuS: number } | null;
  /** "phase a, b, c" load averages */
  loads: string[];
  /** llmgw's own time per request over the non-streamed rounds, from its added-latency histogram (ms) */
  own?: OwnTime | null;
}

/** A histogram's share of the measured rounds: how many, their mean and interpolated median, ms. */
export interface OwnTime {
  n: number;
  mean: number;
  p50: number;
}

/** Cumulative bucket counts by upper bound (seconds), with the sum and count, of one Prometheus histogram. */
export interface Histogram {
  buckets: [number, number][];
  sum: number;
  count: number;
}

/** Reads label-less histogram `name` from a Prometheus text page (the tests' strict parser). */
export function readHistogram(page: string, name: string): Histogram {
  const h: Histogram = { buckets: [], sum: 0, count: 0 };
  for (const x of parsePromText(page).get(name)?.samples ?? []) {
    if (x.name === `${name}_bucket`) h.buckets.push([x.labels.le === '+Inf' ? Infinity : Number(x.labels.le), x.value]);
    else if (x.name === `${name}_sum`) h.sum = x.value;
    else if (x.name === `${name}_count`) h.count = x.value;
  }
  return h;
}

/** What `after` added to `before`: the requests between two reads, their mean and median (linear within a bucket), ms. */
export function ownTime(before: Histogram, after: Histogram): OwnTime | null {
  const n = after.count - before.count;
  if (n <= 0) return null;
  const half = n / 2;
  let prevBound = 0;
  let prevCum = 0;
  let p50 = Number.NaN;
  for (const [i, [bound, cum]] of after.buckets.entries()) {
    const c = cum - (before.buckets[i]?.[1] ?? 0);
    if (c >= half) {
      p50 = Number.isFinite(bound)
        ? prevBound + ((half - prevCum) / Math.max(1, c - prevCum)) * (bound - prevBound)
        : prevBound;
      break;
    }
    prevBound = bound;
    prevCum = c;
  }
  return { n, mean: ((after.sum - before.sum) / n) * 1000, p50: p50 * 1000 };
}

const FLOOR = 'bare Node';
const f = (x: number, d = 2): string => (Number.isFinite(x) ? x.toFixed(d) : '—');
const signed = (x: number, d = 3): string => (Number.isFinite(x) ? `${x >= 0 ? '+' : ''}${x.toFixed(d)}` : '—');
const ok = (xs: number[]): number[] => xs.filter((x) => !Number.isNaN(x));
const p = (xs: number[], q: number): number => quantile(ok(xs), q);
const mean = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : Number.NaN);
const md = (head: string[], rows: string[][]): string =>
  [head, head.map(() => '---'), ...rows].map((r) => `| ${r.join(' | ')} |`).join('\n');
/** The paired median with its bootstrap 95 % interval. */
const withCi = (diffs: number[]): string => {
  const [lo, hi] = medianCi95(diffs);
  return `${signed(quantile(diffs, 0.5))} [${signed(lo)}, ${signed(hi)}]`;
};
const column = (r: Rounds, name: string, k: number): number[] => (r.by.get(name) ?? []).map((row) => row[k] as number);

function latencyTable(r: PeersResult): string {
  const direct = column(r.latency, 'direct', 0);
  const floor = column(r.latency, FLOOR, 0);
  return md(
    [
      'path',
      'p50',
      'p90',
      'p99',
      'added p50, paired [95% CI]',
      'added p99 (p99 − direct p99)',
      `above ${FLOOR}, paired p50 [95% CI]`,
      'failed',
    ],
    r.paths.map(({ name }) => {
      const xs = column(r.latency, name, 0);
      const base = name === 'direct';
      return [
        name,
        f(p(xs, 0.5), 3),
        f(p(xs, 0.9), 3),
        f(p(xs, 0.99), 3),
        base ? '—' : withCi(pairedDifferences(xs, direct)),
        base ? '—' : signed(p(xs, 0.99) - p(direct, 0.99), 2),
        base || name === FLOOR ? '—' : withCi(pairedDifferences(xs, floor)),
        String(r.latency.failed.get(name) ?? 0),
      ];
    }),
  );
}

function streamTable(r: PeersResult): string {
  return md(
    [
      'path',
      'TTFB p50',
      'TTFB p99',
      'added TTFB p50, paired [95% CI]',
      'first token p50',
      'total p50',
      'added total p50, paired',
      'failed',
    ],
    r.paths.map(({ name }) => {
      const [fb, ft, end] = [0, 1, 2].map((k) => column(r.streams, name, k)) as [number[], number[], number[]];
      const base = name === 'direct';
      return [
        name,
        f(p(fb, 0.5)),
        f(p(fb, 0.99)),
        base ? '—' : withCi(pairedDifferences(fb, column(r.streams, 'direct', 0))),
        f(p(ft, 0.5)),
        f(p(end, 0.5)),
        base ? '—' : signed(quantile(pairedDifferences(end, column(r.streams, 'direct', 2)), 0.5), 2),
        `${r.streams.failed.get(name) ?? 0}/${r.settings.streams}`,
      ];
    }),
  );
}

function cpuTable(r: PeersResult): string {
  const floorUs = mean(r.cpu.get(FLOOR)?.proxyUs ?? []);
  return md(
    [
      'path',
      'req/s (pass 1 / 2)',
      'p50 ms',
      'p99 ms',
      'proxy CPU µs/req',
      `× ${FLOOR}`,
      'req per proxy CPU-s',
      'engine CPU µs/req',
      'client CPU',
      'failed',
    ],
    r.paths.map(({ name }) => {
      const c = r.cpu.get(name);
      if (!c) return [name, '—'];
      const us = mean(c.proxyUs);
      const proxy = name !== 'direct';
      return [
        name,
        c.rps.map((x) => f(x, 0)).join(' / '),
        f(mean(c.p50)),
        f(mean(c.p99)),
        proxy ? f(us, 1) : '—',
        proxy ? `${f(us / floorUs)}×` : '—',
        proxy ? f(1e6 / us, 0) : '—',
        f(mean(c.engineUs), 1),
        `${f(mean(c.clientPct), 0)} %`,
        String(c.failed),
      ];
    }),
  );
}

function throughputSection(r: PeersResult): string[] {
  const t = r.throughput;
  if (!t) return [];
  const b = t.report;
  const sent = Math.max(1, b.requests.sent);
  return [
    `### Throughput: \`llmgw bench\` through llmgw, c=${r.settings.tputC}, ${r.settings.tputS} s, one-token answers`,
    '',
    md(
      ['requests', 'req/s', 'success', 'p50 ms', 'p99 ms', 'llmgw CPU µs/req', 'client CPU'],
      [
        [
          String(b.requests.sent),
          f(b.requestsPerS, 0),
          `${f((b.requests.ok / sent) * 100, 3)} %`,
          f(b.latencyMs?.p50 ?? Number.NaN),
          f(b.latencyMs?.p99 ?? Number.NaN),
          f((t.proxyCpuS / sent) * 1e6, 1),
          `${f((b.clientCpuS / b.durationS) * 100, 0)} %`,
        ],
      ],
    ),
    '',
    ...(b.errors.length
      ? [
          `Failures: ${b.errors.map((e) => `${e.count}× ${e.kind}${e.first[0] ? ` (${e.first[0].slice(0, 120)})` : ''}`).join('; ')}`,
          '',
        ]
      : []),
  ];
}

function goals(r: PeersResult): string[] {
  const vsFloor = pairedDifferences(column(r.latency, 'llmgw', 0), column(r.latency, FLOOR, 0));
  const [lo, hi] = medianCi95(vsFloor);
  const ratio = mean(r.cpu.get('llmgw')?.proxyUs ?? []) / mean(r.cpu.get(FLOOR)?.proxyUs ?? []);
  const t = r.throughput?.report;
  const verdict = (met: boolean): string => (met ? 'met' : 'not met');
  return [
    '### Goals (issue 20, to be judged with keys, quotas and metrics on)',
    '',
    `- llmgw's added p50 within 0.05 ms of the ${FLOOR} floor: llmgw − ${FLOOR}, paired median ${signed(quantile(vsFloor, 0.5))} ms [${signed(lo)}, ${signed(hi)}] — ${verdict(quantile(vsFloor, 0.5) <= 0.05)}`,
    `- CPU per request ≤ 1.1× the floor's: ${f(ratio)}× — ${verdict(ratio <= 1.1)}`,
    t
      ? `- 5,000 req/s for 60 s with 100 % success: ${f(t.requestsPerS, 0)} req/s for ${f(t.durationS, 0)} s, ${t.requests.failed} failed — ${verdict(t.requestsPerS >= 5000 && t.durationS >= 60 && t.requests.failed === 0)}`
      : '- 5,000 req/s for 60 s: not run (--throughput-seconds 0)',
  ];
}

/** The whole report, markdown. */
export function peersReport(r: PeersResult): string {
  const s = r.settings;
  return [
    `## npm run bench:peers — ${new Date().toISOString().slice(0, 16)}Z, node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'})`,
    '',
    `One sim engine process (${s.tps} tokens/s: a one-token answer waits ~${f(1000 / s.tps, 1)} ms); every path its own process in front of it; a bearer key on every request.`,
    ...r.paths.map((x) => `- **${x.name}**: ${x.about}`),
    ...r.skipped.map((x) => `- **${x.name}**: skipped — ${x.skipped}`),
    '',
    `### Non-streamed: ${s.rounds} interleaved rounds after 100 warm-up (ms, request sent → body read; max_tokens 1; one keep-alive connection per path)`,
    '',
    latencyTable(r),
    '',
    ...(r.own
      ? [
          `llmgw's own time in these rounds (its \`llmgw_gateway_added_latency_seconds\`: arrival to the upstream request sent, plus the answer's head to passed on; ${r.own.n} requests): p50 ~${f(r.own.p50, 3)} ms (within its bucket), mean ${f(r.own.mean, 3)} ms. What llmgw adds above that is the hop itself (the sockets, the kernel, the wake-ups).`,
          '',
        ]
      : []),
    `### Streamed: ${s.streams} interleaved rounds after 10 warm-up (ms; max_tokens 16; TTFB = the first body byte)`,
    '',
    streamTable(r),
    '',
    `### CPU per request: \`llmgw bench\` c=${s.cpuC}, ${s.cpuS} s per path after 3 s warm-up, two passes (the second reversed); CPU = utime+stime of the proxy's process tree (/proc)`,
    '',
    cpuTable(r),
    '',
    ...throughputSection(r),
    ...goals(r),
    '',
    `Load average (1, 5, 15 min): ${r.loads.join('; ')}.`,
  ].join('\n');
}
