/**
 * Two control planes over one MySQL and one Temporal: B in this process, A a real `llmgw control-plane` process with
 * listeners and a server certificate of its own. A, starting beside B, joins B's ensureEngines run instead of
 * terminating it. Two real agents given both URLs register with A and run their node workers through A's door; a
 * model serves through the gateway under load. A is killed -9: no request fails, no replica is rebuilt, no engine
 * replaced and no shard even run again — the agents fail over to B (their log says so once), their workers move to
 * B's door with their shards' activities running on; `ctl nodes` and `ctl scale` through B work. A started again
 * changes nothing. Every line every role process wrote to stderr is a JSON log line, none with ANSI escapes.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { ctlCommand } from '../../cli/ctl/index';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { listEngineKeys, readEngineState } from '../../lib/engine-state';
import { SHARD_HEARTBEAT_S } from '../../lib/liveness';
import { QUEUES, workflowIds } from '../../lib/names';
import { issueServerCertificate, loadCa } from '../../lib/pki';
import { pidAlive } from '../../lib/process';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import {
  agentCertFlags,
  notJsonLog,
  processExited,
  spawnAgent,
  spawnLlmgw,
  untilLogged,
  type AgentProc,
  type LlmgwProc,
} from '../helpers/llmgw-process';
import { startLoad, waitRoutable } from '../helpers/load';
import { registerNode, simInventory, stopSimCluster } from '../helpers/node-workers';
import { freePort } from '../helpers/ports';
import { writeOperatorCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const MODEL = 'twice';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const json = (line: string): Record<string, unknown> => JSON.parse(line) as Record<string, unknown>;
/** A runShard as Temporal has it: the same activity id and start time across the failover mean it was never run again. */
interface Shard {
  id: string;
  started: number;
  attempt: number;
  beat: number;
}

describe('two control planes over one MySQL and one Temporal; one killed -9 under load', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-control-planes-'));
  let temporal: DevServer;
  let config: ServerConfig;
  let fileB = '';
  let fileA = '';
  let urlA = '';
  let doorA = '';
  let cpB: ControlPlane;
  let gateway: RunningGateway;
  const runsOfA: LlmgwProc[] = [];
  const agents: AgentProc[] = [];
  const stateDir = (node: string): string => join(dir, 'state', node);

  const startA = async (): Promise<LlmgwProc> => {
    const a = spawnLlmgw(['control-plane', '--config', fileA]);
    runsOfA.push(a);
    // It bundles the workflows at start: seconds of CPU on a busy machine.
    await untilLogged(a, 'control plane listening', 120_000, 'control plane A to listen');
    return a;
  };
  const ctl = async (...args: string[]): Promise<string> => {
    let out = '';
    await ctlCommand([...args, '--config', fileB, '--server', cpB.url], (s) => void (out += s));
    return out;
  };
  /** Each ready replica's shard: its node and the engine pid the node's state dir records. */
  const engines = async (): Promise<Record<string, { node: string; pid: number }>> => {
    const out: Record<string, { node: string; pid: number }> = {};
    for (const r of (await cpB.store.listReplicas(MODEL)).filter((x) => x.state === 'ready')) {
      const node = r.shards[0]?.nodeId as string;
      const st = listEngineKeys(stateDir(node))
        .map((k) => readEngineState(stateDir(node), k))
        .find((s) => s?.replicaId === r.id);
      if (st) out[r.id] = { node, pid: st.enginePid };
    }
    return out;
  };
  const shards = async (replicaIds: string[]): Promise<Record<string, Shard>> => {
    const out: Record<string, Shard> = {};
    for (const id of replicaIds) {
      const d = await cpB.client.workflow.getHandle(workflowIds.replica(id)).describe();
      const p = d.raw.pendingActivities?.find((a) => a.activityType?.name === 'runShard');
      if (!p) throw new Error(`${id} has no runShard pending`);
      const ms = (t: { seconds?: unknown; nanos?: number | null } | null | undefined): number =>
        Number(t?.seconds ?? 0) * 1000 + Math.floor((t?.nanos ?? 0) / 1e6);
      out[id] = {
        id: String(p.activityId),
        started: ms(p.lastStartedTime),
        attempt: Number(p.attempt),
        beat: ms(p.lastHeartbeatTime),
      };
    }
    return out;
  };
  const rebuildsSince = async (t: number): Promise<string[]> =>
    (await cpB.store.recentEvents(200))
      .filter((e) => e.kind === 'replica.rebuilding' && e.at.getTime() >= t)
      .map((e) => e.message);
  const linesOf = (a: AgentProc, msg: string): Record<string, unknown>[] =>
    a.stderr.map(json).filter((l) => String(l.msg).startsWith(msg));

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: 'sim://twice',
          replicas: 2,
          profiles: [
            { name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '200'] },
          ],
        },
      ],
    });
    // A: the same MySQL, Temporal and CA; listeners and a server certificate of its own.
    const server = issueServerCertificate(loadCa(join(config.tls.ca, '..')), 'control-plane-a', [
      '127.0.0.1',
      'localhost',
    ]);
    writeFileSync(join(dir, 'a.crt'), server.certPem);
    writeFileSync(join(dir, 'a.key'), server.keyPem, { mode: 0o600 });
    const configA: ServerConfig = {
      ...config,
      listeners: {
        ...config.listeners,
        controlPlane: { host: '127.0.0.1', port: await freePort() },
        temporalDoor: { host: '127.0.0.1', port: await freePort() },
      },
      tls: { ...config.tls, serverCert: join(dir, 'a.crt'), serverKey: join(dir, 'a.key') },
    };
    urlA = `https://127.0.0.1:${configA.listeners.controlPlane.port}`;
    doorA = `127.0.0.1:${configA.listeners.temporalDoor.port}`;
    fileA = join(dir, 'a.yaml');
    fileB = join(dir, 'b.yaml');
    writeFileSync(fileA, stringify(configA));
    writeFileSync(fileB, stringify(config));
    cpB = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    await writeOperatorCert(config, cpB.store);
    gateway = await startGateway({
      host: '127.0.0.1',
      port: 0,
      routing: new RoutingTable(() => cpB.store.routeRows(), { refreshMs: config.gateway.refreshMs }),
      apiKeys: [],
    });
    // A node that is a row and a heartbeat, with no GPU and no worker: its ensureEngines (started by B at its
    // registration) waits for ever on node-e1, so A's start pass finds it running.
    await registerNode(cpB, 'e1', simInventory({ gpus: 0 }));
    await waitFor(
      async () => (await cpB.client.workflow.getHandle(workflowIds.engines('e1')).describe()).status.name === 'RUNNING',
      { timeoutMs: 20_000, what: 'ensureEngines on e1' },
    );
    await startA();
  }, 240_000);

  afterAll(async () => {
    for (const p of [...agents, ...runsOfA]) if (p.child.exitCode === null) p.child.kill('SIGKILL');
    const pids = new Map<string, number>();
    for (const node of ['a1', 'a2']) {
      for (const k of listEngineKeys(stateDir(node))) {
        const st = readEngineState(stateDir(node), k);
        if (st) pids.set(k, st.enginePid).set(`${k}.shim`, st.shimPid);
      }
    }
    await stopSimCluster({
      cp: cpB,
      model: MODEL,
      workflows: [workflowIds.model(MODEL), workflowIds.engines('e1')],
      workers: [],
      pids,
      gateway,
      temporal,
      mysqlUrl: config.mysql.url,
      dropDatabase,
    });
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test('A, started beside B, joins the ensureEngines run B started instead of terminating it', async () => {
    const before = (await cpB.client.workflow.getHandle(workflowIds.engines('e1')).describe()).runId;
    const joined = json(
      await untilLogged(
        runsOfA[0] as LlmgwProc,
        'ensureEngines joined',
        30_000,
        "A's start pass to join e1's ensureEngines",
      ),
    );
    expect(joined).toMatchObject({ c: 'control-plane', nodeId: 'e1', runId: before });
    const now = await cpB.client.workflow.getHandle(workflowIds.engines('e1')).describe();
    expect({ runId: now.runId, status: now.status.name }).toEqual({ runId: before, status: 'RUNNING' });
  });

  test('kill -9 of the control plane the agents use, under load: they fail over to B, nothing fails, nothing is rebuilt or run again', async () => {
    const certs = async (node: string): Promise<string[]> => agentCertFlags(dir, config, cpB.store, node);
    // Both ways of naming several control planes: a comma list, and --server repeated.
    agents.push(
      await spawnAgent(
        'a1',
        ['--server', `${urlA},${cpB.url}`, ...(await certs('a1')), '--state-dir', stateDir('a1')],
        { gpus: 2 },
      ),
    );
    agents.push(
      await spawnAgent(
        'a2',
        ['--server', urlA, '--server', cpB.url, ...(await certs('a2')), '--state-dir', stateDir('a2')],
        { gpus: 2 },
      ),
    );
    for (const a of agents)
      expect(linesOf(a, 'registered')[0]).toMatchObject({ server: urlA, temporal: doorA, door: true });
    // Control plane A, a real `llmgw control-plane`, applied the catalog as it started: join that deployment.
    await cpB.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
      workflowIdConflictPolicy: 'USE_EXISTING',
    });
    await waitFor(async () => Object.keys(await engines()).length === 2, {
      timeoutMs: 90_000,
      what: 'two replicas ready with their engines recorded',
    });
    await waitRoutable(gateway.url, MODEL);
    const before = await engines();
    const shardsBefore = await shards(Object.keys(before));

    const load = startLoad(gateway.url, MODEL, { clients: 2 });
    const streams = startLoad(gateway.url, MODEL, { clients: 1, stream: true, maxTokens: 32 });
    await sleep(2000);
    const a = runsOfA[0] as LlmgwProc;
    const t0 = Date.now();
    a.child.kill('SIGKILL');
    await processExited(a.child);
    const moved: Record<string, { failover: number; worker: number }> = {};
    for (const agent of agents) {
      const failover = json(await untilLogged(agent, 'control plane failover', 30_000, `${agent.node} to fail over`));
      const worker = json(
        await untilLogged(agent, 'node worker moved to the door', 30_000, `${agent.node}'s worker to move to B's door`),
      );
      expect(failover).toMatchObject({ level: 'warn', from: urlA, to: cpB.url });
      expect(worker).toMatchObject({ from: doorA, to: cpB.door.address });
      moved[agent.node] = { failover: Date.parse(String(failover.t)) - t0, worker: Date.parse(String(worker.t)) - t0 };
    }
    const movedBy = Date.now();
    // The shards' activities heartbeat on through B's door: the same activities, never run again (a shard
    // heartbeats every SHARD_HEARTBEAT_S).
    await waitFor(async () => Object.values(await shards(Object.keys(before))).every((s) => s.beat > movedBy), {
      timeoutMs: SHARD_HEARTBEAT_S * 1000 + 20_000,
      what: "every shard to heartbeat through B's door",
    });
    const shardsAfter = await shards(Object.keys(before));
    // Every node that runs a shard heartbeats through B's door (a node without one may only hold a long poll open).
    for (const node of new Set(Object.values(before).map((e) => e.node)))
      expect(cpB.door.lastCall(node)).toBeGreaterThan(movedBy);

    // The operator's view and a scale, through the surviving control plane.
    const nodes = JSON.parse(await ctl('nodes', '--json')) as { id: string; state: string }[];
    expect(
      nodes
        .filter((n) => n.id !== 'e1')
        .map((n) => [n.id, n.state])
        .sort(),
    ).toEqual([
      ['a1', 'ready'],
      ['a2', 'ready'],
    ]);
    const t1 = Date.now();
    await ctl('scale', MODEL, '3', '--timeout', '120');
    const scaledMs = Date.now() - t1;
    await sleep(1000);
    const [s, st] = await Promise.all([load.stop(), streams.stop()]);
    console.log(
      `control plane A killed -9: ${s.ok} requests and ${st.ok} streams ok, ${s.failed + st.failed} failed; failover after ${JSON.stringify(moved)} ms; scale to 3 through B ${scaledMs} ms`,
    );
    expect({ failed: s.failed + st.failed, failures: [...s.failures, ...st.failures] }).toEqual({
      failed: 0,
      failures: [],
    });
    expect(s.ok).toBeGreaterThan(20);
    expect(st.ok).toBeGreaterThan(5);
    expect(shardsAfter).toEqual(
      Object.fromEntries(Object.entries(shardsBefore).map(([id, x]) => [id, { ...x, beat: expect.any(Number) }])),
    );
    const after = await engines();
    expect(Object.keys(after)).toHaveLength(3);
    for (const [id, e] of Object.entries(before)) {
      expect(after[id]).toEqual(e);
      expect(pidAlive(e.pid)).toBe(true);
    }
    expect(await rebuildsSince(t0)).toEqual([]);
    for (const agent of agents) {
      expect(linesOf(agent, 'control plane failover')).toHaveLength(1);
      expect(agent.stderr.filter((l) => /shard left running|shard adopted|NODE WORKER NOT MOVED/.test(l))).toEqual([]);
    }
  }, 300_000);

  test('A started again: the agents stay with B, nothing is rebuilt, no request fails', async () => {
    const t0 = Date.now();
    const before = await engines();
    const load = startLoad(gateway.url, MODEL, { clients: 2 });
    await startA();
    await sleep(5000);
    const s = await load.stop();
    console.log(`control plane A back: ${s.ok} requests ok, ${s.failed} failed`);
    expect({ failed: s.failed, failures: s.failures }).toEqual({ failed: 0, failures: [] });
    expect(await engines()).toEqual(before);
    expect(await rebuildsSince(t0)).toEqual([]);
    for (const agent of agents) {
      expect(linesOf(agent, 'control plane failover')).toHaveLength(1);
      expect(linesOf(agent, 'node worker moved')).toHaveLength(1);
    }
    // Their workers still call B's door (a shard's heartbeat at the latest SHARD_HEARTBEAT_S after A came back).
    for (const node of new Set(Object.values(before).map((e) => e.node)))
      await waitFor(() => (cpB.door.lastCall(node) ?? 0) > t0 + 4000, {
        timeoutMs: SHARD_HEARTBEAT_S * 1000 + 20_000,
        what: `${node} to call B's door after A came back`,
      });
  }, 180_000);

  test("every role process wrote JSON log lines only, Temporal core's included, and no ANSI escape", () => {
    for (const p of [...runsOfA, ...agents]) {
      expect(p.stderr.length).toBeGreaterThan(0);
      expect(notJsonLog(p.stderr)).toEqual([]);
    }
    // The agents' workers' Rust core logged through the same logger (its lines say sdkComponent "core").
    for (const agent of agents)
      expect(agent.stderr.map(json).filter((l) => l.sdkComponent === 'core').length).toBeGreaterThan(0);
  });
});
