/**
 * GPU pinning end to end: a node reporting 8 GPUs (the fake nvidia-smi's count and topo -m matrix), four 2-GPU sim
 * replicas placed by the workflows, each engine a real process whose CUDA_VISIBLE_DEVICES (read from /proc) and
 * /health say which GPUs it holds. A launch on a held GPU fails loudly; a killed replica is rebuilt on the GPUs it
 * freed; an agent restart adopts every engine with its GPUs. Real Temporal, MariaDB, control plane, node worker.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { stringify } from 'yaml';
import { createNodeActivities } from '../../activities/node';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import { ctlCommand } from '../../cli/ctl/index';
import type { ServerConfig } from '../../config/types';
import { parseTopoMatrix } from '../../lib/hardware/gpu-topology';
import { QUEUES, workflowIds } from '../../lib/names';
import { simEngineArgv } from '../../lib/sim/argv';
import type { ReplicaRecord } from '../../lib/types';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { registerNode, simInventory, startNodeWorker, stopSimCluster, type NodeWorker } from '../helpers/node-workers';
import { writeOperatorCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const MODEL = 'pin';
const NODE = 'gpu-8';
const FAKE_SMI = join(__dirname, '../fixtures/nvidia-smi');

describe('GPU pinning on an 8-GPU node', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-gpu-pin-'));
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();
  const adopted: string[] = [];
  const ctl = async (...args: string[]): Promise<string> => {
    let out = '';
    await ctlCommand([...args, '--config', join(stateDir, 'server.yaml')], (s) => void (out += s));
    return out;
  };

  const ready = async (): Promise<ReplicaRecord[]> =>
    (await cp.store.listReplicas(MODEL)).filter((r) => r.state === 'ready');
  const allReady = (): Promise<ReplicaRecord[]> =>
    waitFor(
      async () => {
        const rs = await ready();
        return rs.length === 4 ? rs : undefined;
      },
      { timeoutMs: 60_000, what: `4 replicas of ${MODEL} ready` },
    );
  /** What the engine of a replica's rank 0 was started with, and what it says on /health. */
  const engineView = async (r: ReplicaRecord): Promise<{ env: string | undefined; health: unknown }> => {
    const pid = pids.get(`${r.id}#0`) ?? 0;
    const env = readFileSync(`/proc/${pid}/environ`, 'utf8')
      .split('\0')
      .find((e) => e.startsWith('CUDA_VISIBLE_DEVICES='))
      ?.split('=')[1];
    const health = await (await fetch(`${r.endpoint}/health`)).json();
    return { env, health };
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: `sim://${MODEL}`,
          replicas: 4,
          profiles: [{ name: 'tp2', engine: 'sim', nodes: 1, gpusPerNode: 2, args: ['--tokens-per-second', '0'] }],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    await writeOperatorCert(config, cp.store);
    writeFileSync(join(stateDir, 'server.yaml'), stringify(config));
  });

  afterAll(async () => {
    await stopSimCluster({
      cp,
      model: MODEL,
      workflows: [workflowIds.model(MODEL)],
      workers,
      pids,
      temporal,
      mysqlUrl: config.mysql.url,
      dropDatabase,
    });
    rmSync(stateDir, { recursive: true, force: true });
  });

  test('four 2-GPU replicas get disjoint GPU pairs, each engine launched on its own', async () => {
    const topo = parseTopoMatrix(
      execFileSync(FAKE_SMI, ['topo', '-m'], { env: { ...process.env, FAKE_NVIDIA_GPUS: '8' }, encoding: 'utf8' }),
    );
    await registerNode(cp, NODE, { ...simInventory({ gpus: 8, fabric: false }), gpuTopology: topo });
    workers.push(
      await startNodeWorker(temporal.address, NODE, pids, {
        stateDir,
        onLog: (msg, f) => void (msg === 'shard adopted' && adopted.push(String(f?.replica))),
      }),
    );
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    const rs = await allReady();
    const pairs = rs.map((r) => r.shards[0]?.gpus ?? []);
    expect([...pairs].sort((a, b) => (a[0] ?? 0) - (b[0] ?? 0))).toEqual([
      [0, 1],
      [2, 3],
      [4, 5],
      [6, 7],
    ]);
    for (const r of rs) {
      const gpus = r.shards[0]?.gpus ?? [];
      expect(await engineView(r)).toEqual({ env: gpus.join(','), health: { status: 'ok', devices: gpus } });
    }
    expect(readdirSync(join(stateDir, 'gpu-locks')).sort()).toEqual(
      [0, 1, 2, 3, 4, 5, 6, 7].map((g) => `gpu${g}.lock`),
    );
    // What the operator sees: each shard's GPUs in ctl replicas, and who holds which in ctl nodes.
    const replicas = await ctl('replicas');
    const nodes = await ctl('nodes');
    console.log(`ctl replicas:\n${replicas}\nctl nodes:\n${nodes}`);
    for (const r of rs)
      expect(replicas).toMatch(
        new RegExp(
          `^${r.id} +${MODEL} +tp2 +ready +${NODE}#0\\[${r.shards[0]?.gpus?.join(',')}\\] +${r.endpoint}`,
          'm',
        ),
      );
    expect(nodes).toMatch(
      new RegExp(
        `^${NODE} +ready +8/8 .*${rs.map((r) => `${r.id}\\[${r.shards[0]?.gpus?.join(',')}\\]`).join(',')}`,
        'm',
      ),
    );
  });

  test("a launch on GPUs another engine holds fails loudly, with the engine's own words", async () => {
    const holder = (await ready()).find((r) => r.shards[0]?.gpus?.[0] === 2) as ReplicaRecord;
    const intruderDir = mkdtempSync(join(tmpdir(), 'llmgw-gpu-intruder-'));
    const node = createNodeActivities({
      nodeId: NODE,
      engineArgv: () => simEngineArgv(),
      stateDir: intruderDir,
      gpuLockDir: join(stateDir, 'gpu-locks'),
    });
    const run = new MockActivityEnvironment().run(node.runShard, {
      replicaId: 'intruder-0',
      model: MODEL,
      source: `sim://${MODEL}`,
      profile: { name: 'tp2', engine: 'sim' as const, nodes: 1, gpusPerNode: 2, args: [] },
      rank: 0,
      world: 1,
      host: '127.0.0.1',
      port: config.enginePorts.base + 99,
      distHost: '127.0.0.1',
      distPort: 0,
      gpus: [3, 2],
    });
    console.log(
      `a launch on held GPUs:\n${await run.then(
        () => 'it started',
        (e: Error) => e.message,
      )}`,
    );
    await expect(run).rejects.toMatchObject({
      type: 'LLMGW_ENGINE_EXITED',
      message: expect.stringMatching(
        new RegExp(
          `exited with code 1.*GPU 3 is held by sim-engine ${MODEL} rank 0 \\(port ${holder.shards[0]?.port}\\)`,
          's',
        ),
      ),
    });
    rmSync(intruderDir, { recursive: true, force: true });
    // The holder never noticed.
    expect((await engineView(holder)).health).toEqual({ status: 'ok', devices: [2, 3] });
  });

  test('a killed replica is rebuilt on the GPUs it freed', async () => {
    const victim = (await ready()).find((r) => r.shards[0]?.gpus?.[0] === 4) as ReplicaRecord;
    const pid = pids.get(`${victim.id}#0`) ?? 0;
    process.kill(pid, 'SIGKILL');
    const rebuilt = await waitFor(
      async () => {
        const r = (await ready()).find((x) => x.id === victim.id);
        return r && pids.get(`${victim.id}#0`) !== pid ? r : undefined;
      },
      { timeoutMs: 30_000, what: `${victim.id} rebuilt with a new engine` },
    );
    expect(rebuilt.shards[0]?.gpus).toEqual([4, 5]);
    expect(await engineView(rebuilt)).toEqual({ env: '4,5', health: { status: 'ok', devices: [4, 5] } });
  });

  test('an agent restart adopts every engine with the GPUs it had', async () => {
    const before = await ready();
    const enginePids = before.map((r) => pids.get(`${r.id}#0`));
    const rebuilds = (await cp.store.recentEvents(500)).filter((e) => e.kind === 'replica.rebuilding').length;
    await workers[0]?.stop();
    workers.push(
      await startNodeWorker(temporal.address, NODE, pids, {
        stateDir,
        onLog: (msg, f) => void (msg === 'shard adopted' && adopted.push(String(f?.replica))),
      }),
    );
    await waitFor(() => adopted.length >= 4, { timeoutMs: 60_000, what: 'the new worker to adopt all four engines' });
    expect([...adopted].sort()).toEqual(before.map((r) => r.id).sort());
    const after = await allReady();
    expect(after.map((r) => [r.id, r.shards[0]?.gpus])).toEqual(before.map((r) => [r.id, r.shards[0]?.gpus]));
    expect(after.map((r) => pids.get(`${r.id}#0`))).toEqual(enginePids);
    for (const r of after) expect((await engineView(r)).env).toBe(r.shards[0]?.gpus?.join(','));
    expect((await cp.store.recentEvents(500)).filter((e) => e.kind === 'replica.rebuilding').length).toBe(rebuilds);
  });
});
