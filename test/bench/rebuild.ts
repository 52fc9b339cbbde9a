/**
 * How fast llmgw heals and how cleanly it drains, on the local cluster (every part a real process), with a
 * load generator on sim-small through the gateway the whole time. Prints:
 *   - drain: time per replica moved, against the engine's own start time (placed → serving), failed requests;
 *   - engine kill -9: time until the replica is rebuilt and serving again;
 *   - node loss (agent and its engines kill -9): time until its replicas serve elsewhere.
 * Run: `npm run bench:rebuild` (takes about a minute). Not a test: figures, not assertions.
 */
import '../helpers/bench-help'; // --help: the comment above
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { tsToMs } from '@temporalio/common/lib/time';
import { runCli, startCluster } from '../../cli/cluster/run';
import { listEngineKeys, readEngineState } from '../../lib/engine-state';
import { workflowIds } from '../../lib/names';
import { pidAlive } from '../../lib/process';
import { TlsClient } from '../../lib/tls-client';
import type { ReplicaRecord } from '../../lib/types';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';
import { startLoad, waitRoutable } from '../helpers/load';
import { clusterBasePort } from '../helpers/ports';

const MODEL = 'sim-small';

async function main(): Promise<void> {
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-bench-'));
  const mysqlUrl = testMysqlUrl();
  const cluster = await startCluster({
    stateDir,
    basePort: await clusterBasePort(),
    mysqlUrl,
    progress: () => undefined,
  });
  const { tls } = cluster.config;
  const operator = new TlsClient({
    caPem: readFileSync(tls.ca, 'utf8'),
    certPem: readFileSync(tls.clientCert, 'utf8'),
    keyPem: readFileSync(tls.clientKey, 'utf8'),
  });
  const api = async <T>(path: string, init?: { method?: string }): Promise<T> =>
    (await (await operator.fetch(`${cluster.controlUrl}${path}`, init)).json()) as T;
  const replicas = async (): Promise<ReplicaRecord[]> =>
    (await api<{ replicas: ReplicaRecord[] }>(`/v1/replicas?model=${MODEL}`)).replicas.filter(
      (r) => r.state !== 'stopped',
    );
  const until = async (what: string, ok: () => Promise<boolean>, ms = 120_000): Promise<number> => {
    const t0 = Date.now();
    while (!(await ok())) {
      if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 25));
    }
    return Date.now() - t0;
  };
  const allReady = async (): Promise<boolean> => (await replicas()).filter((r) => r.state === 'ready').length === 2;
  const enginePidsOn = (ports: number[]): number[] => {
    const ps = execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
    // The engine itself, not the shim that runs it (whose argv carries the engine's command after `--`).
    return ps
      .split('\n')
      .filter(
        (l) => l.includes('sim-engine') && !l.includes('engine-shim') && ports.some((p) => l.includes(`--port ${p} `)),
      )
      .map((l) => Number(l.trim().split(/\s+/)[0]));
  };
  /** Every engine and shim the node's state dir records (the local cluster's engines/<node>). */
  const recordedPids = (node: string): number[] => {
    const dir = join(stateDir, 'engines', node);
    return listEngineKeys(dir)
      .map((k) => readEngineState(dir, k))
      .flatMap((st) => (st ? [st.enginePid, st.shimPid] : []));
  };
  const killPid = (pid: number): void => {
    if (pidAlive(pid)) process.kill(pid, 'SIGKILL');
  };
  let lostNode: string | undefined;
  const lines: string[] = [];
  try {
    // Put both sim-small replicas on sim-a (sim-large out of the way), then drain sim-a: two replicas to move.
    const ctl = (...args: string[]): Promise<void> =>
      runCli(['ctl', ...args, '--config', cluster.configFile], () => undefined);
    await ctl('scale', 'sim-large', '0');
    await ctl('scale', 'sim-small', '0');
    await until('sim-small to stop', async () => (await replicas()).length === 0);
    await ctl('cordon', 'sim-b');
    await ctl('cordon', 'sim-c');
    await ctl('scale', 'sim-small', '2');
    await until(
      'two sim-small replicas on sim-a',
      async () => (await allReady()) && (await replicas()).every((r) => r.shards[0]?.nodeId === 'sim-a'),
    );
    await ctl('uncordon', 'sim-b');
    await ctl('uncordon', 'sim-c');
    await waitRoutable(cluster.gatewayUrl, MODEL, 10_000, cluster.apiKey);
    await new Promise((r) => setTimeout(r, 1000)); // the gateway's table holds both
    const load = startLoad(cluster.gatewayUrl, MODEL, { clients: 4, apiKey: cluster.apiKey });
    await new Promise((r) => setTimeout(r, 1000));
    const before = load.stats();
    const t0 = Date.now();
    await ctl('drain', 'sim-a');
    const drainMs = Date.now() - t0;
    const during = load.stats();
    const { events } = await api<{ events: { at: string; kind: string; replicaId?: string }[] }>('/v1/events');
    const at = (kind: string, id: string | undefined): number =>
      Date.parse(events.find((e) => e.kind === kind && e.replicaId === id)?.at ?? 'x');
    const moved = events.filter((e) => e.kind === 'replica.starting' && Date.parse(e.at) >= t0).map((e) => e.replicaId);
    const starts = moved.map((id) => at('replica.ready', id) - at('replica.starting', id));
    lines.push(
      `drain sim-a: ${moved.length} replicas moved in ${drainMs} ms, ${Math.round(drainMs / Math.max(moved.length, 1))} ms per replica; ` +
        `each replacement's own start (placed → serving): ${starts.join(', ')} ms; the rest per replica is the original's 2 s drain and stop`,
    );
    lines.push(`  requests during the drain: ${during.ok - before.ok} ok, ${during.failed - before.failed} failed`);
    // Each original's stop once no gateway routes it: from its in-flight wait's end to its workflow's end (its
    // shards stopped, engines gone, released, recorded stopped), from the replica workflow's history.
    const originals = events
      .filter((e) => e.kind === 'replica.stopped' && Date.parse(e.at) >= t0)
      .map((e) => e.replicaId ?? '');
    const temporal = new Client({ connection: await Connection.connect({ address: cluster.config.temporal.address }) });
    const stops: number[] = [];
    for (const id of originals) {
      const hist = (await temporal.workflow.getHandle(workflowIds.replica(id)).fetchHistory()).events ?? [];
      const wait = hist.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'waitInflight');
      const waited = hist.find(
        (e) => Number(e.activityTaskCompletedEventAttributes?.scheduledEventId ?? -1) === Number(wait?.eventId ?? -2),
      );
      const done = hist.find((e) => e.workflowExecutionCompletedEventAttributes);
      if (waited && done) stops.push(tsToMs(done.eventTime) - tsToMs(waited.eventTime));
    }
    await temporal.connection.close();
    lines.push(
      `  each original, from its in-flight wait's end to its workflow's end (shards stopped, released, recorded stopped): ${stops.join(', ')} ms`,
    );
    await ctl('uncordon', 'sim-a');

    // Engine kill -9.
    const victim = (await replicas()).find((r) => r.state === 'ready');
    const port = victim?.shards[0]?.port ?? 0;
    const [pid] = enginePidsOn([port]);
    const f0 = load.stats().failed;
    process.kill(pid as number, 'SIGKILL');
    const killed = Date.now();
    await until(
      'the replica to leave ready',
      async () =>
        !(await replicas()).some((r) => r.id === victim?.id && r.state === 'ready' && r.endpoint?.endsWith(`:${port}`)),
    );
    const unroutable = Date.now() - killed;
    await until('the rebuilt replica to serve', allReady);
    lines.push(
      `engine kill -9: unroutable after ${unroutable} ms, rebuilt and serving after ${Date.now() - killed} ms; ${load.stats().failed - f0} failed requests`,
    );

    // Node loss: the agent and every engine of a node holding a sim-small replica.
    const node = (await replicas()).find((r) => r.state === 'ready')?.shards[0]?.nodeId ?? 'sim-c';
    const shardPorts = (await replicas())
      .flatMap((r) => r.shards)
      .filter((s) => s.nodeId === node)
      .map((s) => s.port);
    const nodeReplicas = (await replicas()).filter((r) => r.shards.some((s) => s.nodeId === node)).map((r) => r.id);
    const f1 = load.stats().failed;
    cluster.processes.get(node)?.kill('SIGKILL');
    // Every engine the node runs, not only sim-small's: a llama-server left answering on it (the local cluster's
    // tiny-llama) would make the node look alive and take the 30 s agent-lost path instead of node loss.
    lostNode = node;
    for (const p of [...enginePidsOn(shardPorts), ...recordedPids(node)]) killPid(p);
    const lost = Date.now();
    await until(`${node}'s replicas to serve elsewhere`, async () => {
      const now = await replicas();
      return (await allReady()) && !now.some((r) => r.shards.some((s) => s.nodeId === node));
    });
    const servedAt = Date.now();
    const ev = (await api<{ events: { at: string; kind: string; replicaId?: string }[] }>('/v1/events')).events
      .filter((e) => e.replicaId === nodeReplicas[0] && Date.parse(e.at) >= lost)
      .map((e) => ({ kind: e.kind, t: Date.parse(e.at) - lost }));
    const first = (kind: string): number | undefined =>
      ev.filter((e) => e.kind === kind).sort((a, b) => a.t - b.t)[0]?.t;
    lines.push(
      `node loss (${node}: agent + engines kill -9, holding ${nodeReplicas.join(', ')}): serving elsewhere after ${servedAt - lost} ms; ${load.stats().failed - f1} failed requests`,
    );
    if (process.env.LLMGW_BENCH_EVENTS) lines.push(JSON.stringify(ev));
    lines.push(
      `  ${nodeReplicas[0]}: node loss acted on (rebuilding) at ${first('replica.rebuilding')} ms, placed again at ${first('replica.starting')} ms, serving at ${first('replica.ready')} ms`,
    );
    const s = await load.stop();
    lines.push(
      `load: ${s.ok} ok, ${s.failed} failed in ${s.durationMs} ms${s.failures.length ? `; first failures: ${s.failures.slice(0, 3).join(' | ')}` : ''}`,
    );
    console.log(lines.join('\n'));
  } finally {
    await cluster.close();
    // The lost node's agent is gone, so nothing else stops what it left (a recorded engine never rebuilt elsewhere).
    if (lostNode) recordedPids(lostNode).forEach(killPid);
    await dropDatabase(mysqlUrl);
    rmSync(stateDir, { recursive: true, force: true });
  }
}

main().catch((err: Error) => {
  console.error(`bench failed: ${err.message}`);
  process.exit(1);
});
