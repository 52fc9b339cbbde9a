/**
 * The node's door as a process of its own (`llmgw node-door`), through the whole path: real agent processes with
 * `--door`, the door process they start and adopt, the replica workflow, a gateway with a gateway certificate under
 * continuous load. An agent SIGTERM and an agent SIGKILL fail no request (the door serves on, its routes read from
 * the engine records); a door replaced under load (new-first: the listening socket handed over as fd 3, the old one
 * draining) fails none; a door killed with SIGKILL is started again by the agent's watchdog within about a second.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServerConfig } from '../../config/types';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { doorAgentFromFiles, doorGet, type DoorAgent } from '../../lib/door-agent';
import { listEngineKeys, readEngineState, sameProcess } from '../../lib/engine-state';
import { QUEUES, workflowIds } from '../../lib/names';
import { parseDoorEndpoint, nodeDoorEndpoint } from '../../lib/node-door';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { nodeDoorArgv, readDoorRecord, type DoorRecord } from '../../workers/node-door/files';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { agentCertFlags, processExited, spawnAgent, type AgentProc } from '../helpers/llmgw-process';
import { startLoad, waitRoutable, type LoadStats } from '../helpers/load';
import { stopSimCluster } from '../helpers/node-workers';
import { freePort } from '../helpers/ports';
import { writeGatewayCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const MODEL = 'doored';
const NODE = 'dp1';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe("the node's door in a process of its own (real agents, door processes, the replica workflow, a gateway)", () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-door-process-'));
  const stateDir = join(dir, NODE);
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let gateway: RunningGateway;
  let doorAgent: DoorAgent;
  let doorPort = 0;
  const agents: AgentProc[] = [];
  const pids = new Map<string, number>();
  const figures: string[] = [];

  const startAgentProc = async (): Promise<AgentProc> => {
    const a = await spawnAgent(NODE, [
      '--server',
      cp.url,
      ...(await agentCertFlags(dir, config, cp.store, NODE)),
      '--state-dir',
      stateDir,
      '--door',
      `127.0.0.1:${doorPort}`,
    ]);
    agents.push(a);
    return a;
  };
  const latest = (): AgentProc => agents[agents.length - 1] as AgentProc;
  /** The door the state dir records, alive (its pid kept for afterAll). */
  const door = (): DoorRecord => {
    const rec = readDoorRecord(stateDir);
    expect(rec).not.toBeNull();
    const r = rec as DoorRecord;
    pids.set(`door ${r.pid}`, r.pid);
    return r;
  };
  const readyOn = async (): Promise<string[]> =>
    (await cp.store.listReplicas(MODEL))
      .filter((r) => r.state === 'ready')
      .flatMap((r) => r.shards.map((s) => s.nodeId));
  const rebuildsSince = async (t: number): Promise<string[]> =>
    (await cp.store.recentEvents(200))
      .filter((e) => e.kind === 'replica.rebuilding' && e.at.getTime() >= t)
      .map((e) => e.message);
  /** The replica's /health through the door, as the gateway's pool reaches it: the status, or the error. */
  const throughDoor = async (): Promise<string> => {
    const [replica] = await cp.store.listReplicas(MODEL);
    const ep = parseDoorEndpoint(nodeDoorEndpoint('127.0.0.1', doorPort, NODE, replica?.id ?? '?'));
    return doorGet(doorAgent, ep as NonNullable<typeof ep>, '/health', 1000).then(
      (r) => String(r.status),
      (err: Error) => err.message,
    );
  };
  const report = (what: string, s: LoadStats, extra = ''): void => {
    const line = `${what}: ${s.ok} ok, ${s.failed} failed of ${s.sent} over ${s.durationMs} ms${extra}`;
    figures.push(line);
    console.log(line);
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: 'sim://doored',
          replicas: 1,
          profiles: [
            { name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '200'] },
          ],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    await writeGatewayCert(config, cp.store);
    doorAgent = doorAgentFromFiles(config.tls, 2000) as DoorAgent;
    expect(doorAgent).not.toBeNull();
    gateway = await startGateway({
      host: '127.0.0.1',
      port: 0,
      routing: new RoutingTable(() => cp.store.routeRows(), { refreshMs: config.gateway.refreshMs }),
      apiKeys: [],
      doorAgent,
    });
    doorPort = await freePort();
    const first = await startAgentProc();
    expect(first.lines.join('\n')).toContain('node door started');
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    await waitFor(async () => (await readyOn()).includes(NODE), { timeoutMs: 60_000, what: 'the replica ready' });
    await waitRoutable(gateway.url, MODEL);
    // Routed through the door, not to the engine's own port.
    const [replica] = await cp.store.listReplicas(MODEL);
    expect((await cp.store.routeRows()).replicas.map((r) => r.endpoint)).toEqual([
      nodeDoorEndpoint('127.0.0.1', doorPort, NODE, replica?.id ?? '?'),
    ]);
  }, 180_000);

  afterAll(async () => {
    console.log(
      `node door process (load average ${(await import('node:os')).loadavg()[0].toFixed(1)}):\n${figures.join('\n')}`,
    );
    for (const a of agents) if (a.child.exitCode === null) a.child.kill('SIGKILL');
    const rec = readDoorRecord(stateDir);
    if (rec) pids.set(`door ${rec.pid}`, rec.pid);
    for (const k of listEngineKeys(stateDir)) {
      const st = readEngineState(stateDir, k);
      if (st) pids.set(k, st.enginePid).set(`${k} shim`, st.shimPid);
    }
    doorAgent?.destroy();
    await stopSimCluster({
      cp,
      model: MODEL,
      workflows: [workflowIds.model(MODEL)],
      workers: [],
      pids,
      gateway,
      temporal,
      mysqlUrl: config.mysql.url,
      dropDatabase,
    });
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test.each([
    ['SIGTERM', 0],
    ['SIGKILL', 1000],
  ] as const)(
    'agent %s under load, restarted: the door serves on (same process), adopted by the next agent; no request fails',
    async (signal, restartAfterMs) => {
      const before = door();
      const t0 = Date.now();
      const load = startLoad(gateway.url, MODEL, { clients: 2 });
      await sleep(500);
      const old = latest();
      old.child.kill(signal);
      await processExited(old.child);
      await sleep(restartAfterMs); // systemd's RestartSec=1 for a crashed agent
      const next = await startAgentProc();
      await waitFor(() => next.lines.some((l) => l.includes('shard adopted')), {
        timeoutMs: 70_000,
        what: 'the new agent to adopt the engine',
      });
      await sleep(1000);
      const s = await load.stop();
      report(`agent ${signal} + restart`, s, `; door pid ${before.pid} kept, ${Date.now() - t0} ms to adoption`);
      expect(next.lines.join('\n')).toContain('node door adopted');
      expect(door().pid).toBe(before.pid);
      expect({ failed: s.failed, failures: s.failures }).toEqual({ failed: 0, failures: [] });
      expect(s.ok).toBeGreaterThan(20);
      expect(await rebuildsSince(t0)).toEqual([]);
    },
    120_000,
  );

  test('an agent restarted while its door is too slow to answer (stopped 4 s) waits for that door and adopts it, rather than start a second one on its port', async () => {
    const before = door();
    const old = latest();
    old.child.kill('SIGKILL');
    await processExited(old.child);
    // A door on a starved node: alive (same pid and start time), its port held, its control listener silent.
    process.kill(before.pid, 'SIGSTOP');
    const resume = setTimeout(() => process.kill(before.pid, 'SIGCONT'), 4000);
    let next: AgentProc;
    try {
      // Resolves once the agent runs: it registers only after its door is settled.
      next = await startAgentProc();
    } finally {
      clearTimeout(resume);
      process.kill(before.pid, 'SIGCONT');
    }
    expect(next.lines.join('\n')).toContain('node door adopted');
    expect(door().pid).toBe(before.pid);
    expect(next.lines.join('\n')).not.toContain('node door started');
    await waitFor(async () => (await throughDoor()) === '200', {
      timeoutMs: 15_000,
      what: 'the replica answering through the same door',
    });
  }, 90_000);

  test('the door replaced under load, new-first (the listening socket handed over): no request fails', async () => {
    const old = door();
    const load = startLoad(gateway.url, MODEL, { clients: 2 });
    await sleep(1000);
    const t0 = performance.now();
    const res = await fetch(`http://127.0.0.1:${old.controlPort}/replace`, {
      method: 'POST',
      headers: { authorization: `Bearer ${old.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ argv: nodeDoorArgv() }),
    });
    const answer = (await res.json()) as { pid?: number; error?: string };
    const servingMs = performance.now() - t0;
    expect({ status: res.status, answer }).toEqual({ status: 200, answer: { ok: true, pid: expect.any(Number) } });
    await waitFor(() => !sameProcess(old.pid, old.startTime), {
      timeoutMs: 40_000,
      what: 'the old door to drain and exit',
    });
    const goneMs = performance.now() - t0;
    await sleep(1000);
    const s = await load.stop();
    const now = door();
    report(
      'door replaced',
      s,
      `; new door serving ${servingMs.toFixed(0)} ms after the call, old one drained and gone after ${goneMs.toFixed(0)} ms`,
    );
    expect(now.pid).toBe(answer.pid);
    expect(now.port).toBe(doorPort);
    expect({ failed: s.failed, failures: s.failures }).toEqual({ failed: 0, failures: [] });
    expect(s.ok).toBeGreaterThan(20);
    // The agent's watchdog follows the new door rather than starting another.
    await sleep(1000);
    expect(door().pid).toBe(answer.pid);
    expect(latest().lines.join('\n')).not.toContain('node door died');
  }, 90_000);

  test("a door killed with SIGKILL is started again by the agent's watchdog within about a second", async () => {
    const old = door();
    expect(await throughDoor()).toBe('200');
    const t0 = performance.now();
    process.kill(old.pid, 'SIGKILL');
    await waitFor(() => (readDoorRecord(stateDir)?.pid ?? old.pid) !== old.pid, {
      timeoutMs: 15_000,
      what: 'a new door recorded',
    });
    const recordedMs = performance.now() - t0;
    await waitFor(async () => (await throughDoor()) === '200', {
      timeoutMs: 15_000,
      what: 'the replica answering through the new door',
    });
    const backMs = performance.now() - t0;
    const line = `door SIGKILL: a new door serving after ${recordedMs.toFixed(0)} ms, the replica answering through it after ${backMs.toFixed(0)} ms`;
    figures.push(line);
    console.log(line);
    expect(door().pid).not.toBe(old.pid);
    expect(latest().lines.join('\n')).toContain('node door started again');
    // Generous for a loaded 2-core machine (the door is a tsx process here; about a second on a quiet one).
    expect(backMs).toBeLessThan(8000);
    // And the load through the gateway is served again.
    await waitRoutable(gateway.url, MODEL, 10_000);
  }, 60_000);
});
