/** How `llmgw bench` shows a run: the progress line (a bar on a terminal, plain lines otherwise) and the report. Pure. */
import type { BenchProgress, BenchReport } from '../lib/bench/run';
import type { Summary } from '../lib/bench/stats';
import { table } from './table';

const BAR = 24;

/** The share of the run done, 0..1 (by requests, or by time for a --duration run). */
function fraction(p: BenchProgress): number {
  const f = 'requests' in p.goal ? p.done / Math.max(1, p.goal.requests) : p.elapsedS / Math.max(1e-9, p.goal.seconds);
  return Math.min(1, Math.max(0, f));
}

/** One progress line; `bar` draws a bar for a terminal (the caller rewrites the line in place), else a plain log line. */
export function progressLine(p: BenchProgress, bar: boolean): string {
  const rate = p.elapsedS > 0 ? p.done / p.elapsedS : 0;
  const of =
    'requests' in p.goal ? `${p.done}/${p.goal.requests}` : `${p.done} in ${p.elapsedS.toFixed(0)}/${p.goal.seconds} s`;
  const stats = `${of}  ${rate.toFixed(0)} req/s  ${p.failed} failed`;
  if (p.warmingUp) return bar ? `warming up… ${p.done} requests` : `bench: warming up, ${p.done} requests`;
  if (!bar) return `bench: ${stats.replace(/ {2}/g, ', ')} (${(fraction(p) * 100).toFixed(0)} %)`;
  const filled = Math.round(fraction(p) * BAR);
  return `[${'#'.repeat(filled)}${'.'.repeat(BAR - filled)}] ${stats}`;
}

// Three significant figures or so; the thresholds sit where rounding would carry (9.996 is "10.0", not "10.00").
const ms = (x: number): string => (x >= 99.95 ? x.toFixed(0) : x >= 9.995 ? x.toFixed(1) : x.toFixed(2));
const statRow = (name: string, s: Summary | null): string[] =>
  s ? [name, ms(s.p50), ms(s.p90), ms(s.p99), ms(s.mean), ms(s.max)] : [name, '—', '', '', '', ''];
const num = (x: number): string => Math.round(x).toLocaleString('en-US');

/** The report as a person reads it. */
export function formatReport(r: BenchReport): string {
  const rq = r.requests;
  const out: string[] = [
    `llmgw bench  ${r.url}  model ${r.model}`,
    `  ${r.stream ? 'streamed' : 'not streamed'}, concurrency ${r.concurrency}, prompt ~${r.promptTokens} tokens, max_tokens ${r.maxTokens}: ${rq.sent} requests in ${r.durationS.toFixed(2)} s`,
    '',
    `  requests   ${rq.ok} ok, ${rq.failed} failed; ${r.requestsPerS.toFixed(1)} completed/s`,
    `  tokens     ${num(r.tokens.completion)} out (${num(r.tokens.completionPerS)}/s), ${num(r.tokens.prompt)} in (${num(r.tokens.promptPerS)}/s)`,
    `  goodput    ${r.goodput.perS.toFixed(1)} req/s with TTFT ≤ ${r.goodput.ttftBudgetMs} ms (${(r.goodput.shareOfOk * 100).toFixed(1)} % of completed)`,
    `  client CPU ${r.clientCpuS.toFixed(2)} s (${r.durationS > 0 ? ((r.clientCpuS / r.durationS) * 100).toFixed(0) : 0} % of one core${r.durationS > 0 && r.clientCpuS / r.durationS > 0.85 ? ': the load generator may be the limit' : ''})`,
    '',
    ...table(
      ['  ms', 'p50', 'p90', 'p99', 'mean', 'max'],
      [
        statRow(r.stream ? '  TTFT' : '  TTFT (whole answer)', r.ttftMs),
        ...(r.stream ? [statRow('  ITL', r.itlMs)] : []),
        statRow('  latency', r.latencyMs),
      ],
    )
      .trimEnd()
      .split('\n'),
  ];
  if (r.errors.length) {
    out.push('', `  failures by kind:`);
    for (const e of r.errors) {
      out.push(`    ${e.count}× ${e.kind}`);
      for (const m of e.first) out.push(`      ${m.replace(/\s+/g, ' ').slice(0, 200)}`);
    }
  }
  return `${out.join('\n')}\n`;
}
