/** Doctor results as text: the `llmgw doctor` report, and the one-cell summary the node list shows. */
import type { DoctorResult } from '../types';

/** True when any check failed (`llmgw doctor` then exits non-zero). */
export const doctorFailed = (results: DoctorResult[]): boolean => results.some((r) => r.status === 'fail');

/** The report: one line per check, its fix under it, then the counts. */
export function formatDoctor(results: DoctorResult[]): string {
  const width = Math.max(...results.map((r) => r.id.length));
  const lines = results.flatMap((r) => [
    `${r.status.toUpperCase().padEnd(4)}  ${r.id.padEnd(width)}  ${r.summary}`,
    ...(r.fix ? [`${' '.repeat(width + 8)}fix: ${r.fix}`] : []),
  ]);
  const n = (s: DoctorResult['status']): number => results.filter((r) => r.status === s).length;
  return `${lines.join('\n')}\n\n${n('pass')} passed, ${n('warn')} warned, ${n('fail')} failed\n`;
}

/** For `ctl nodes`: `fail: cpu-flags,libgomp warn: gpudirect-rdma`, `ok`, or `-` when the node reported none. */
export function doctorColumn(results: DoctorResult[] | undefined): string {
  if (!results?.length) return '-';
  const ids = (s: DoctorResult['status']): string[] => results.filter((r) => r.status === s).map((r) => r.id);
  const parts = [
    ['fail', ids('fail')],
    ['warn', ids('warn')],
  ]
    .filter(([, l]) => l.length)
    .map(([s, l]) => `${s}: ${(l as string[]).join(',')}`);
  return parts.join(' ') || 'ok';
}
