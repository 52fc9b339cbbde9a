/**
 * Fault scenarios on the local cluster (every role a real process, a private MariaDB; every replica routed
 * through its node's door, as the local cluster runs them), with both cores saturated and load through the
 * gateway on two models: what each outage costs in failed requests, rebuilt replicas and replaced engine processes. Shared by test/faults/ (asserts) and npm run bench:faults (prints).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startCluster, SIM_NODES, type Cluster } from '../../cli/cluster/run';
import { readFileSync } from 'node:fs';
import { listEngineKeys, readEngineState, sameProcess } from '../../lib/engine-state';
import { fileTail } from '../../lib/process';
import { readDoorRecord } from '../../workers/node-door/files';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import { startLoad, waitRoutable, type LoadStats } from './load';
import { clusterBasePort } from './ports';
import { startPrivateMariadb, type PrivateMariadb } from './private-mariadb';
import { waitFor } from './wait';

/** The models loaded during every scenario: one single-node, one over two nodes of a fabric. */
export const LOADED_MODELS = ['sim-small', 'sim-large'] as const;

/** A cluster for fault scenarios, with what a scenario needs to break it and to judge the damage. */
export interface FaultCluster {
  cluster: Cluster;
  mysql: PrivateMariadb;
  store: Store;
  /** Every live engine process by its shard key (`<replica>.g<n>.r<rank>`), from the agents' state dirs. */
  enginePids(): Map<string, number>;
  /** Every live node door process by node id, from the agents' state dirs. */
  doorPids(): Map<string, number>;
  /** A role's log file (`logs/<role>.log` in the cluster's state dir). */
  roleLog(role: string): string;
  close(): Promise<void>;
}

/** Brings up the local cluster (sim engines only) over a private MariaDB. */
export async function startFaultCluster(progress: (line: string) => void = () => undefined): Promise<FaultCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-faults-'));
  const mysql = await startPrivateMariadb(join(dir, 'mariadb'));
  const stateDir = join(dir, 'state');
  let cluster: Cluster;
  try {
    cluster = await startCluster({
      stateDir,
      basePort: await clusterBasePort(),
      mysqlUrl: mysql.url,
      progress,
      llama: false,
    });
  } catch (err) {
    await mysql.stop();
    throw err;
  }
  const pool = await openDatabase(mysql.url);
  const store = new Store(pool);
  for (const m of LOADED_MODELS) await waitRoutable(cluster.gatewayUrl, m, 30_000, cluster.apiKey);
  return {
    cluster,
    mysql,
    store,
    enginePids: () => {
      const pids = new Map<string, number>();
      for (const n of SIM_NODES) {
        const d = join(stateDir, 'engines', n.id);
        for (const k of listEngineKeys(d)) {
          const st = readEngineState(d, k);
          if (st && sameProcess(st.enginePid, st.engineStartTime)) pids.set(k, st.enginePid);
        }
      }
      return pids;
    },
    roleLog: (role) => join(stateDir, 'logs', `${role}.log`),
    doorPids: () => {
      const pids = new Map<string, number>();
      for (const n of SIM_NODES) {
        const rec = readDoorRecord(join(stateDir, 'engines', n.id));
        if (rec && sameProcess(rec.pid, rec.startTime)) pids.set(n.id, rec.pid);
      }
      return pids;
    },
    async close(): Promise<void> {
      await cluster.close();
      await pool.end().catch(() => undefined);
      await mysql.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Two busy loops at normal priority: both cores saturated, as on a loaded host. Each checks now and then that this
 * process still lives and ends with it, so a test killed midway leaves no loop burning the machine.
 */
export function burnCpu(loops = 2): { stop(): void } {
  const script = `i=0; while :; do i=$((i+1)); if [ $i -ge 200000 ]; then kill -0 ${process.pid} 2>/dev/null || exit 0; i=0; fi; done`;
  const children: ChildProcess[] = Array.from({ length: loops }, () =>
    spawn('sh', ['-c', script], { stdio: 'ignore' }),
  );
  return { stop: () => children.forEach((c) => c.kill('SIGKILL')) };
}

/** What one scenario cost. */
export interface FaultResult {
  name: string;
  /** requests sent through the gateway during the scenario, and those that failed (with the first few reasons) */
  load: LoadStats;
  /** replica.rebuilding events since the fault */
  rebuilds: string[];
  /** engines before the fault that are gone or were replaced after it */
  replacedEngines: string[];
  /** node doors before the fault that are gone or were replaced after it (a door outlives its agent) */
  replacedDoors: string[];
  /** roles (agents, control plane, gateway, ca-worker) whose process is not running at the end: one that died unseen */
  deadRoles: string[];
  /** from the fault (or, for an outage, from the moment it was restored) until every loaded model had all its desired replicas ready again, ms */
  servingAgainMs: number;
  /** after it: the loaded models' ready replicas routed through their node's door, and those that were not (id → endpoint) */
  doors: DoorRoutes;
}

/** Which ready replicas of the loaded models are routed through their node's door. */
export interface DoorRoutes {
  through: number;
  /** `<replica>: <endpoint>` of each ready replica whose endpoint is not its rank 0 node's door route */
  not: string[];
}

/** The loaded models' ready replicas against the door routes of the cluster's node doors (`Cluster.doors`). */
export async function doorRoutes(fc: FaultCluster): Promise<DoorRoutes> {
  const out: DoorRoutes = { through: 0, not: [] };
  for (const m of LOADED_MODELS)
    for (const r of (await fc.store.listReplicas(m)).filter((x) => x.state === 'ready')) {
      const node = r.shards.find((s) => s.rank === 0)?.nodeId ?? '?';
      const door = fc.cluster.doors[node];
      if (door && r.endpoint === `https://${door}/nodes/${node}/replicas/${r.id}`) out.through++;
      else out.not.push(`${r.id}: ${r.endpoint ?? 'no endpoint'}`);
    }
  return out;
}

/**
 * Runs one scenario: load on LOADED_MODELS and both cores busy; `fault` breaks something (and, for an outage,
 * waits and restores it); then waits until every model serves its desired replicas again and `settleMs` more.
 */
export async function runFault(
  fc: FaultCluster,
  name: string,
  fault: () => Promise<void>,
  o: { settleMs?: number; clients?: number; expectRebuild?: boolean } = {},
): Promise<FaultResult> {
  const before = fc.enginePids();
  const doorsBefore = fc.doorPids();
  const burn = burnCpu();
  const loads = LOADED_MODELS.map((m) =>
    startLoad(fc.cluster.gatewayUrl, m, { clients: o.clients ?? 2, apiKey: fc.cluster.apiKey }),
  );
  const t0 = Date.now();
  let servingAgainMs = 0;
  try {
    await new Promise((r) => setTimeout(r, 2000));
    const startedAt = Date.now();
    await fault();
    const faultAt = Date.now();
    // A real failure: wait until llmgw noticed it (a rebuild), then until it serves again.
    if (o.expectRebuild) {
      await waitFor(
        async () =>
          (await fc.store.recentEvents(200)).some(
            (e) => e.kind === 'replica.rebuilding' && e.at.getTime() >= startedAt,
          ),
        { timeoutMs: 60_000, what: `a rebuild after ${name}` },
      );
    }
    await waitFor(
      async () => {
        for (const m of LOADED_MODELS) {
          const rs = (await fc.store.listReplicas(m)).filter((r) => r.state !== 'stopped');
          const desired = (await fc.store.listModels()).find((x) => x.name === m)?.replicas ?? 0;
          if (rs.filter((r) => r.state === 'ready').length < desired) return false;
        }
        return true;
      },
      { timeoutMs: 120_000, what: `every loaded model serving again after ${name}` },
    );
    servingAgainMs = o.expectRebuild ? await readyAfterRebuilds(fc, faultAt) : Date.now() - faultAt;
    await new Promise((r) => setTimeout(r, o.settleMs ?? 3000));
  } finally {
    burn.stop();
  }
  const stats = await Promise.all(loads.map((l) => l.stop()));
  const load = stats.reduce((a, s) => ({
    sent: a.sent + s.sent,
    ok: a.ok + s.ok,
    failed: a.failed + s.failed,
    failures: [...a.failures, ...s.failures].slice(0, 10),
    durationMs: Math.max(a.durationMs, s.durationMs),
  }));
  const rebuilds = (await fc.store.recentEvents(500))
    .filter((e) => e.kind === 'replica.rebuilding' && e.at.getTime() >= t0)
    .map((e) => `${e.replicaId}: ${e.message}`);
  const after = fc.enginePids();
  const replacedEngines = [...before].filter(([k, pid]) => after.get(k) !== pid).map(([k, pid]) => `${k} (pid ${pid})`);
  const doorsAfter = fc.doorPids();
  const replacedDoors = [...doorsBefore]
    .filter(([node, pid]) => doorsAfter.get(node) !== pid)
    .map(([node, pid]) => `${node} (pid ${pid})`);
  const deadRoles = [...fc.cluster.processes]
    .filter(([, p]) => p.exitCode !== null || p.signalCode !== null)
    .map(([role, p]) => `${role} (${p.signalCode ?? `code ${p.exitCode}`}): ${fileTail(fc.roleLog(role), 4)}`);
  return {
    name,
    load,
    rebuilds,
    replacedEngines,
    replacedDoors,
    deadRoles,
    servingAgainMs,
    doors: await doorRoutes(fc),
  };
}

/** From `since` until the last replica rebuilt after it was ready again (the events' own times), ms. */
async function readyAfterRebuilds(fc: FaultCluster, since: number): Promise<number> {
  const events = (await fc.store.recentEvents(500)).filter((e) => e.at.getTime() >= since).reverse();
  const rebuilt = new Set(events.filter((e) => e.kind === 'replica.rebuilding').map((e) => e.replicaId));
  let last = since;
  for (const id of rebuilt) {
    const ready = events.find((e) => e.replicaId === id && e.kind === 'replica.ready');
    if (ready) last = Math.max(last, ready.at.getTime());
  }
  return last - since;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Starts a role again and waits until its log says `ready` once more: a scenario ends with the role back, not
 * merely spawned (a control plane still starting when the next scenario killed Temporal failed its start).
 */
async function restartRole(fc: FaultCluster, name: string, ready: string): Promise<void> {
  const count = (): number => {
    let text = '';
    try {
      text = readFileSync(fc.roleLog(name), 'utf8');
    } catch {
      // not written yet
    }
    return text.split(`"msg":"${ready}"`).length - 1;
  };
  const before = count();
  const p = fc.cluster.restart(name);
  const how = await waitFor(
    () => (p.exitCode !== null || p.signalCode !== null ? 'exited' : count() > before && 'ready'),
    { timeoutMs: 90_000, what: `${name} started again to log "${ready}"` },
  );
  if (how === 'exited')
    throw new Error(`${name} exited (${p.signalCode ?? `code ${p.exitCode}`}): ${fileTail(fc.roleLog(name), 8)}`);
}

/** Kills a role process with SIGKILL and waits until it is gone. */
async function killRole(fc: FaultCluster, name: string): Promise<void> {
  const p = fc.cluster.processes.get(name);
  if (!p) throw new Error(`no ${name} process`);
  const gone = new Promise((r) => p.once('exit', r));
  p.kill('SIGKILL');
  await gone;
}

/** The outages that must cost nothing: each kills part of llmgw's own path and brings it back. */
export const OUTAGES: Record<string, (fc: FaultCluster, downMs: number) => Promise<void>> = {
  'control plane kill -9': async (fc, downMs) => {
    await killRole(fc, 'control-plane');
    await sleep(downMs);
    await restartRole(fc, 'control-plane', 'control plane listening');
  },
  'Temporal kill -9': async (fc, downMs) => {
    fc.cluster.temporal.kill();
    await sleep(downMs);
    await fc.cluster.temporal.start();
  },
  'MySQL unreachable': async (fc, downMs) => {
    fc.mysql.kill();
    await sleep(downMs);
    await fc.mysql.start();
  },
  'agent kill -9, back after RestartSec': async (fc) => {
    await killRole(fc, 'sim-a');
    await sleep(1000); // the shipped unit's RestartSec (lib/onboard/plan.ts)
    await restartRole(fc, 'sim-a', 'agent running');
  },
};
