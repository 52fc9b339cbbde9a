/**
 * A drain racing a failure: the replica being moved crashes and is rebuilt before its replacement could be
 * placed. The drain counts it as moved and withdraws the replacement, so the deployment ends with the replicas
 * it wants — none left waiting for capacity forever beside its original. Real Temporal, MariaDB, node workers
 * and sim engine processes.
 */
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { QUEUES, workflowIds } from '../../lib/names';
import type { ReplicaRecord } from '../../lib/types';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { drainProgressQuery, type DrainResult } from '../../workflows/contracts/drain';
import { deploymentQuery } from '../../workflows/contracts/model';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { registerNode, simInventory, startNodeWorker, stopSimCluster, type NodeWorker } from '../helpers/node-workers';
import { waitFor } from '../helpers/wait';

const MODEL = 'race';

describe('a drain whose replica is rebuilt elsewhere before its replacement is placed', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();
  const live = async (): Promise<ReplicaRecord[]> =>
    (await cp.store.listReplicas(MODEL)).filter((r) => r.state !== 'stopped');

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: 'sim://race',
          replicas: 2,
          profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] }],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    await registerNode(cp, 'r1', simInventory({ gpus: 2 }));
    workers.push(await startNodeWorker(temporal.address, 'r1', pids, { cp }));
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    await waitFor(async () => (await live()).filter((r) => r.state === 'ready').length === 2, {
      timeoutMs: 60_000,
      what: 'both replicas ready on r1',
    });
  }, 120_000);

  afterAll(async () => {
    await stopSimCluster({
      cp,
      model: MODEL,
      workflows: [workflowIds.model(MODEL), workflowIds.drain('r1')],
      workers,
      pids,
      temporal,
      mysqlUrl: config.mysql.url,
      dropDatabase,
    });
  }, 60_000);

  test('the crashed replica counts as moved, its unplaced replacement is withdrawn, and the deployment ends with 2 serving', async () => {
    // r2 has room for one: the drain moves the first replica there; the second one's replacement has nowhere to go.
    await registerNode(cp, 'r2', simInventory({ gpus: 1 }));
    workers.push(await startNodeWorker(temporal.address, 'r2', pids, { cp }));
    const handle = await cp.client.workflow.start('drainNode', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.drain('r1'),
      args: [{ nodeId: 'r1', timeoutS: 120 }],
    });
    const waiting = await waitFor(
      async () => {
        const p = await handle.query(drainProgressQuery);
        return p.moved === 1 && p.current?.replacement && p.current.state === 'waiting' ? p.current : undefined;
      },
      { timeoutMs: 60_000, what: "the drain to move one replica and wait to place the second one's replacement" },
    );

    // The second replica's engine dies: it is rebuilt, but can go nowhere (r1 cordoned, r2 full) either.
    const pid = pids.get(`${waiting.replicaId}#0`) ?? 0;
    expect(pid).toBeGreaterThan(0);
    process.kill(pid, 'SIGKILL');
    const r = (await handle.result()) as DrainResult;
    expect(r.moved).toHaveLength(2);
    // The replacement was withdrawn (it never served); the original keeps its place in the deployment.
    await waitFor(async () => (await live()).every((x) => x.id !== waiting.replacement), {
      timeoutMs: 20_000,
      what: `the withdrawn replacement ${waiting.replacement} to stop`,
    });
    const dep = await cp.client.workflow.getHandle(workflowIds.model(MODEL)).query(deploymentQuery);
    expect(dep.replacing).toEqual([]);
    expect(dep.replicas).toContain(waiting.replicaId);
    expect(dep.replicas).toHaveLength(2);

    // Capacity arrives: the original is placed there, and nothing else waits.
    await registerNode(cp, 'r3', simInventory({ gpus: 1 }));
    workers.push(await startNodeWorker(temporal.address, 'r3', pids, { cp }));
    const settled = await waitFor(
      async () => {
        const l = await live();
        return l.length === 2 && l.every((x) => x.state === 'ready') ? l : undefined;
      },
      { timeoutMs: 40_000, what: 'two ready replicas and nothing else' },
    );
    expect(settled.flatMap((x) => x.shards.map((s) => s.nodeId)).sort()).toEqual(['r2', 'r3']);
    expect(settled.map((x) => x.id)).toContain(waiting.replicaId);
  }, 180_000);
});
