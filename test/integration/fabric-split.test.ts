/**
 * Two fabrics under one name, end to end on sim nodes: each node's inventory comes from the agent's own discovery
 * (sysfs fixture, a fake sminfo answering with that node's subnet manager), the replica workflow places over a real
 * Temporal server and MariaDB, and real sim engines run. Two nodes that declare `ib-a` but see different subnet
 * managers never receive one multi-node replica, and the reason says why; a third node on the first one's subnet
 * manager makes a pair, whose ranks run with exactly ib-a's adapters (NCCL_IB_HCA, read from the engines' environ).
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createNodeActivities } from '../../activities/node';
import { fabricsView } from '../../cli/ctl/views/fabrics';
import { formatNodes } from '../../cli/ctl/nodes';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { nodeQueue, QUEUES, workflowIds } from '../../lib/names';
import { simEngineArgv } from '../../lib/sim/argv';
import { parseNodeId, type NodeInventory, type ReplicaRecord } from '../../lib/types';
import { discover } from '../../workers/agent/discovery';
import { NODE_WORKER_OPTIONS } from '../../workers/agent/worker';
import { AGENT_HEARTBEAT_MS } from '../../lib/liveness';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { waitFor } from '../helpers/wait';

const FIXTURES = join(__dirname, '../fixtures');
const SM_A = '0x98039b03009fa1c0';
const SM_B = '0xb83fd20300c1d2e0';
const MODEL = 'split';

describe('one fabric name over two subnet managers (sim nodes, real Temporal and MariaDB)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-fabric-split-'));
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  const stops: (() => Promise<void>)[] = [];
  const pids = new Map<string, number>();

  /** What the agent on `node` registers: its discovery with --fabric ib-a over the NDR fixture, its sminfo seeing `sm`. */
  const agentInventory = async (node: string, sm: string): Promise<NodeInventory> => {
    const sminfo = join(dir, `sminfo-${node}`);
    writeFileSync(sminfo, `#!/bin/sh\nFAKE_SMINFO_GUID=${sm} exec ${join(FIXTURES, 'sminfo')} "$@"\n`);
    chmodSync(sminfo, 0o755);
    return discover(
      {
        nodeId: parseNodeId(node),
        server: cp.url,
        nvidiaSmi: 'nvidia-smi',
        noGpu: true,
        ibRoot: join(FIXTURES, 'sysfs/ndr-a'),
        sminfo,
        cpuinfo: '/proc/cpuinfo',
        fabrics: ['ib-a'],
        advertiseHost: '127.0.0.1',
        stateDir: join(dir, node),
        stopEnginesOnExit: true,
        log: () => undefined,
      },
      ['sim'],
    );
  };
  /** Joins `node` as its agent would: the inventory in the store (as registration keeps it), and its node worker. */
  const join_ = async (node: string, sm: string): Promise<NodeInventory> => {
    const discovered = await agentInventory(node, sm);
    // No GPU on this machine: the sim engine needs one GPU a shard.
    const inventory: NodeInventory = {
      ...discovered,
      gpus: [{ index: 0, name: 'NVIDIA A100-SXM4-80GB', memoryMiB: 81920, uuid: `GPU-${node}` }],
    };
    await cp.store.upsertNode(parseNodeId(node), inventory);
    // Its agent's heartbeats, straight into the store: a silent node would be judged lost (node liveness).
    const beat = setInterval(
      () => void cp.store.heartbeat(parseNodeId(node)).catch(() => undefined),
      AGENT_HEARTBEAT_MS,
    );
    stops.push(async () => clearInterval(beat));
    const connection = await NativeConnection.connect({ address: temporal.address });
    const worker = await Worker.create({
      ...NODE_WORKER_OPTIONS,
      connection,
      taskQueue: nodeQueue(node),
      activities: createNodeActivities({
        nodeId: node,
        engineArgv: () => simEngineArgv(),
        stopGraceMs: 3000,
        inventory,
        log: (msg, f) => {
          if (msg === 'shard started') pids.set(`${node}#${f?.rank}`, Number(f?.pid));
        },
      }),
    });
    const running = worker.run();
    stops.push(async () => {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
      await connection.close();
    });
    return inventory;
  };
  const replica = async (): Promise<ReplicaRecord | undefined> =>
    (await cp.store.listReplicas(MODEL)).find((r) => r.state !== 'stopped');

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: 'sim://split',
          replicas: 1,
          profiles: [{ name: 'tp2', engine: 'sim', nodes: 2, gpusPerNode: 1, args: ['--tokens-per-second', '0'] }],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
  });

  afterAll(async () => {
    for (const r of (await cp?.store.listReplicas(MODEL)) ?? [])
      await cp.client.workflow
        .getHandle(workflowIds.replica(r.id))
        .terminate()
        .catch(() => undefined);
    await cp?.client.workflow
      .getHandle(workflowIds.model(MODEL))
      .terminate()
      .catch(() => undefined);
    for (const stop of stops) await stop();
    for (const pid of pids.values())
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    await cp?.close();
    await temporal?.stop();
    if (config) await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  });

  test("never one replica across them, with the reason; a node on the same SM makes a pair whose ranks get ib-a's adapters", async () => {
    const n1 = await join_('fs-n1', SM_A);
    await join_('fs-n2', SM_B);
    expect(n1.fabricIdentity?.['ib-a']).toMatchObject({ smGuid: SM_A, strength: 'sm-guid' });
    expect(n1.doctor?.find((d) => d.id === 'subnet-manager/ib-a')?.status).toBe('pass');

    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    const waiting = await waitFor(
      async () => {
        const r = await replica();
        return r?.state === 'waiting' ? r : undefined;
      },
      { timeoutMs: 30_000, what: 'the replica to wait for a placement' },
    );
    expect(waiting.shards).toEqual([]);
    expect(waiting.reason).toContain(
      `fabric ib-a is 2 fabrics under one name (its nodes see different subnet managers, and a replica never spans them): SM ${SM_A}: fs-n1 (1 of 2 usable); SM ${SM_B}: fs-n2 (1 of 2 usable)`,
    );

    // What `ctl fabrics` and `ctl nodes` show from the same node list.
    const nodes = (await cp.store.listNodes()).map((n) => ({ ...n, replicas: [], gpusUsed: 0 }));
    const view = fabricsView(nodes);
    expect(view.fabrics.map((f) => [f.key, f.nodes.map((n) => n.id)])).toEqual([
      [`ib-a@${SM_A}`, ['fs-n1']],
      [`ib-a@${SM_B}`, ['fs-n2']],
    ]);
    expect(view.fabrics[0]?.warnings[0]).toContain(`the other side: SM ${SM_B}: fs-n2`);
    expect(formatNodes(nodes)).toMatch(
      new RegExp(`fs-n2\\s+ready\\s+0/1\\s+ib-a\\(mlx5_0,mlx5_1\\)\\[split: SM ${SM_B}\\]`),
    );

    // Still waiting some retries later: no shard ever on both.
    await new Promise((r) => setTimeout(r, 3000));
    expect((await replica())?.state).toBe('waiting');
    expect(await cp.store.listShards()).toEqual([]);

    // A third node on fs-n1's subnet manager: the pair is fs-n1 + fs-n3, never fs-n2.
    await join_('fs-n3', SM_A);
    const ready = await waitFor(
      async () => {
        const r = await replica();
        return r?.state === 'ready' ? r : undefined;
      },
      { timeoutMs: 60_000, what: 'the replica to be placed on fs-n1 and fs-n3 and serve' },
    );
    expect(ready.shards.map((s) => s.nodeId).sort()).toEqual(['fs-n1', 'fs-n3']);
    for (const [key, pid] of pids) {
      const env = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      expect([key, env.filter((e) => e.startsWith('NCCL_IB_HCA='))]).toEqual([key, ['NCCL_IB_HCA==mlx5_0:1,mlx5_1:1']]);
    }
    expect([...pids.keys()].sort()).toEqual(['fs-n1#0', 'fs-n3#1']);
  });
});
