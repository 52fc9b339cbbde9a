/**
 * Maintenance and failure under load, on a real Temporal server, real MariaDB, real node workers and sim
 * engine processes, with a load generator running through a real gateway the whole time:
 * draining a node that holds two replicas fails no request; a killed engine is rebuilt while the other
 * replica takes the requests.
 */
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { QUEUES, workflowIds } from '../../lib/names';
import type { ReplicaRecord } from '../../lib/types';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { drainProgressQuery, type DrainProgress, type DrainResult } from '../../workflows/contracts/drain';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { startLoad, waitRoutable } from '../helpers/load';
import { registerNode, simInventory, startNodeWorker, stopSimCluster, type NodeWorker } from '../helpers/node-workers';
import { waitFor } from '../helpers/wait';

const MODEL = 'solo';

describe('drain and rebuild under load', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let gateway: RunningGateway;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();

  const live = async (): Promise<ReplicaRecord[]> =>
    (await cp.store.listReplicas(MODEL)).filter((r) => r.state !== 'stopped');
  const readyOn = async (): Promise<Record<string, string[]>> => {
    const out: Record<string, string[]> = {};
    for (const r of await live()) if (r.state === 'ready') for (const s of r.shards) (out[s.nodeId] ??= []).push(r.id);
    return out;
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: 'sim://solo',
          replicas: 2,
          profiles: [
            { name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '200'] },
          ],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    gateway = await startGateway({
      host: '127.0.0.1',
      port: 0,
      routing: new RoutingTable(() => cp.store.routeRows(), { refreshMs: config.gateway.refreshMs }),
      apiKeys: [],
    });
    // n1 alone first, with room for both replicas, so the drain has two to move.
    await registerNode(cp, 'n1', simInventory({ gpus: 2 }));
    workers.push(await startNodeWorker(temporal.address, 'n1', pids, { cp }));
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    await waitFor(async () => (await readyOn()).n1?.length === 2, {
      timeoutMs: 60_000,
      what: 'both replicas ready on n1',
    });
    for (const id of ['n2', 'n3']) {
      await registerNode(cp, id, simInventory({ gpus: 1 }));
      workers.push(await startNodeWorker(temporal.address, id, pids, { cp }));
    }
  });

  afterAll(async () => {
    if (process.env.LLMGW_DEBUG)
      for (const e of ((await cp?.store.recentEvents(100)) ?? []).reverse()) console.log(JSON.stringify(e));
    await stopSimCluster({
      cp,
      model: MODEL,
      workflows: [workflowIds.model(MODEL), workflowIds.drain('n1')],
      workers,
      pids,
      gateway,
      temporal,
      mysqlUrl: config.mysql.url,
      dropDatabase,
    });
  });

  test('draining a node with two replicas moves both, one at a time, and fails no request', async () => {
    await waitRoutable(gateway.url, MODEL);
    const plain = startLoad(gateway.url, MODEL, { clients: 3 });
    const streamed = startLoad(gateway.url, MODEL, { clients: 2, stream: true, maxTokens: 40 }); // 200 ms each: in flight at every stop
    await waitFor(() => plain.stats().ok > 20 && streamed.stats().ok > 2, {
      timeoutMs: 20_000,
      what: 'the load to get going',
    });

    const started = Date.now();
    const handle = await cp.client.workflow.start('drainNode', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.drain('n1'),
      args: [{ nodeId: 'n1', timeoutS: 120 }],
    });
    // A second drain of the same node joins the first.
    const again = await cp.client.workflow.start('drainNode', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.drain('n1'),
      args: [{ nodeId: 'n1', timeoutS: 120 }],
      workflowIdConflictPolicy: 'USE_EXISTING',
    });
    expect(again.firstExecutionRunId).toBe(handle.firstExecutionRunId);
    const seen: DrainProgress[] = [];
    const result = handle.result() as Promise<DrainResult>;
    let done = false;
    void result.finally(() => void (done = true)).catch(() => undefined);
    while (!done) {
      const p = await handle.query(drainProgressQuery).catch(() => null);
      if (p && JSON.stringify(p) !== JSON.stringify(seen.at(-1))) seen.push(p);
      // One at a time: never both of n1's replicas replaced at once, and n1 never gets a new one.
      const deployment = await cp.client.workflow
        .getHandle(workflowIds.model(MODEL))
        .query<{ replacing: unknown[] }>('deployment');
      expect(deployment.replacing.length).toBeLessThanOrEqual(1);
      await new Promise((r) => setTimeout(r, 200));
    }
    const r = await result;
    console.log(`drain of 2 replicas: ${Date.now() - started}ms`);
    const [p1, p2] = [await plain.stop(), await streamed.stop()];
    console.log(`requests during the drain: ${p1.ok} plain + ${p2.ok} streamed ok, ${p1.failed + p2.failed} failed`);

    expect(r.moved).toHaveLength(2);
    expect({ failed: p1.failed + p2.failed, failures: [...p1.failures, ...p2.failures] }).toEqual({
      failed: 0,
      failures: [],
    });
    expect(p2.ok).toBeGreaterThan(5);
    const on = await readyOn();
    expect(on.n1).toBeUndefined();
    expect((on.n2 ?? []).length + (on.n3 ?? []).length).toBe(2);
    expect(await cp.store.nodeState('n1' as never)).toBe('cordoned');
    // Progress said what moved: 0 of 2, then 1 of 2 with the replica moving and its replacement, then done.
    expect(seen.some((p) => p.phase === 'moving' && p.current?.replacement)).toBe(true);
    expect(seen.some((p) => p.moved === 1 && p.total === 2)).toBe(true);
    expect(await handle.query(drainProgressQuery)).toMatchObject({ phase: 'done', moved: 2, total: 2, current: null });
  });

  test('a killed engine is rebuilt while the other replica takes the requests', async () => {
    await waitRoutable(gateway.url, MODEL);
    const load = startLoad(gateway.url, MODEL, { clients: 3 });
    await waitFor(() => load.stats().ok > 20, { timeoutMs: 20_000, what: 'the load to get going' });
    const victim = (await live()).find((r) => r.state === 'ready');
    expect(victim).toBeDefined();
    const pid = pids.get(`${victim?.id}#0`) ?? 0;
    expect(pid).toBeGreaterThan(0);
    const killedAt = Date.now();
    process.kill(pid, 'SIGKILL');
    await waitFor(async () => (await live()).find((r) => r.id === victim?.id && r.state !== 'ready'), {
      timeoutMs: 10_000,
      what: 'the replica to leave ready',
    });
    const noticed = Date.now() - killedAt;
    await waitFor(async () => (await live()).filter((r) => r.state === 'ready').length === 2, {
      timeoutMs: 30_000,
      what: 'the replica to be rebuilt and ready again',
    });
    console.log(`engine kill -9: unroutable after ${noticed}ms, rebuilt and serving after ${Date.now() - killedAt}ms`);
    const s = await load.stop();
    console.log(`requests meanwhile: ${s.ok} ok, ${s.failed} failed`);
    expect({ failed: s.failed, failures: s.failures }).toEqual({ failed: 0, failures: [] });
    expect(pids.get(`${victim?.id}#0`)).not.toBe(pid);
  });
});
