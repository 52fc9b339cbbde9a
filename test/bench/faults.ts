/**
 * npm run bench:faults — every fault scenario once on the local cluster (real processes, a private MariaDB),
 * both cores saturated, load on sim-small and sim-large through the gateway: failed requests, rebuilt replicas,
 * replaced engines and the time until every model serves its desired replicas again. The outages of llmgw's
 * own path must cost nothing; the real failures (an engine, a node) must be caught and healed fast.
 * Not a test: figures, not assertions (test/faults/ asserts the outages).
 */
import '../helpers/bench-help'; // --help: the comment above
import { execFileSync } from 'node:child_process';
import { OUTAGES, runFault, startFaultCluster, type FaultCluster, type FaultResult } from '../helpers/faults';

const DOWN_MS = Number(process.env.FAULT_DOWN_MS ?? 30_000);

/** Engine processes (not their shims) listening on `ports`. */
function enginePidsOn(ports: number[]): number[] {
  const ps = execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
  return ps
    .split('\n')
    .filter(
      (l) => l.includes('sim-engine') && !l.includes('engine-shim') && ports.some((p) => l.includes(`--port ${p} `)),
    )
    .map((l) => Number(l.trim().split(/\s+/)[0]));
}

/** The real failures: llmgw must notice them and serve elsewhere. */
const FAILURES: Record<string, (fc: FaultCluster) => Promise<void>> = {
  'engine kill -9 (sim-small)': async (fc) => {
    const r = (await fc.store.listReplicas('sim-small')).find((x) => x.state === 'ready');
    const port = r?.shards[0]?.port;
    if (!port) throw new Error('no ready sim-small replica');
    for (const pid of enginePidsOn([port])) process.kill(pid, 'SIGKILL');
  },
  'node gone (sim-c: agent and its engines kill -9)': async (fc) => {
    const ports = (await fc.store.listShards()).filter((s) => s.nodeId === 'sim-c').map((s) => s.port);
    fc.cluster.processes.get('sim-c')?.kill('SIGKILL');
    for (const pid of enginePidsOn(ports)) process.kill(pid, 'SIGKILL');
  },
};

async function main(): Promise<void> {
  const t0 = Date.now();
  const fc = await startFaultCluster();
  process.stderr.write(
    `cluster up in ${((Date.now() - t0) / 1000).toFixed(1)} s; outages last ${DOWN_MS / 1000} s each\n`,
  );
  const results: FaultResult[] = [];
  try {
    for (const [name, outage] of Object.entries(OUTAGES)) {
      process.stderr.write(`${name} …\n`);
      results.push(await runFault(fc, name, () => outage(fc, DOWN_MS)));
    }
    for (const [name, failure] of Object.entries(FAILURES)) {
      process.stderr.write(`${name} …\n`);
      results.push(await runFault(fc, name, () => failure(fc), { settleMs: 5000, expectRebuild: true }));
    }
  } finally {
    await fc.close();
  }
  const rows = results.map((r) => [
    r.name,
    `${r.load.failed} of ${r.load.sent}`,
    String(r.rebuilds.length),
    String(r.replacedEngines.length),
    `${(r.servingAgainMs / 1000).toFixed(1)} s`,
  ]);
  const head = [
    'scenario (both cores busy, load on 2 models)',
    'failed requests',
    'rebuilt',
    'engines replaced',
    'all desired ready again',
  ];
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string => `| ${cells.map((c, i) => c.padEnd(w[i] ?? 0)).join(' | ')} |`;
  process.stdout.write(`${line(head)}\n${line(w.map((n) => '-'.repeat(n)))}\n${rows.map(line).join('\n')}\n`);
  for (const r of results) {
    if (r.load.failures.length)
      process.stdout.write(`\n${r.name}: first failures:\n  ${r.load.failures.slice(0, 3).join('\n  ')}\n`);
    if (r.rebuilds.length) process.stdout.write(`\n${r.name}: rebuilds:\n  ${r.rebuilds.slice(0, 4).join('\n  ')}\n`);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:faults failed: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
