/**
 * llmgw's own processes are not a single point of failure: two control workers run at once, and a drain
 * survives one of them being killed (SIGKILL, a real process) and the Temporal server restarting under it
 * (same database file), and still completes with no failed request through the gateway.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';
import { startTemporalDev, type DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { QUEUES, workflowIds } from '../../lib/names';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { drainProgressQuery, type DrainResult } from '../../workflows/contracts/drain';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { startLoad, waitRoutable } from '../helpers/load';
import { registerNode, simInventory, startNodeWorker, stopSimCluster, type NodeWorker } from '../helpers/node-workers';
import { freePort } from '../helpers/ports';
import { waitFor } from '../helpers/wait';

const MODEL = 'solo';
const LLMGW = resolve(__dirname, '../../bin/llmgw.js');

describe('a drain survives a killed control worker and a Temporal restart', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-durable-'));
  let port = 0;
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let second: ChildProcess | undefined;
  let gateway: RunningGateway;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();
  const startTemporal = (): Promise<DevServer> =>
    startTemporalDev({ port, uiPort: null, dbFile: join(dir, 'temporal.db') });

  beforeAll(async () => {
    port = await freePort();
    temporal = await startTemporal();
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
    // A second control worker, as its own process (so it can be killed for real), on its own control-plane port.
    const file = join(dir, 'server.yaml');
    writeFileSync(
      file,
      stringify({
        ...config,
        listeners: {
          ...config.listeners,
          controlPlane: { host: '127.0.0.1', port: await freePort() },
          temporalDoor: { host: '127.0.0.1', port: await freePort() },
        },
        catalog: config.catalog,
      }),
    );
    // --no-apply: the test starts the deployment itself, below (a control plane applies its catalog at start otherwise).
    second = spawn(process.execPath, [LLMGW, 'control-plane', '--config', file, '--no-apply'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let secondLog = '';
    second.stderr?.on('data', (b: Buffer) => void (secondLog = (secondLog + b.toString()).slice(-4000)));
    await waitFor(
      async () => {
        if (second?.exitCode !== null) throw new Error(`second control plane exited: ${secondLog}`);
        const { pollers } = await cp.client.workflowService.describeTaskQueue({
          namespace: 'default',
          taskQueue: { name: QUEUES.control },
          taskQueueType: 1,
        });
        return (pollers ?? []).length >= 2;
      },
      { timeoutMs: 60_000, what: 'two control workers polling llmgw-control' },
    );

    gateway = await startGateway({
      host: '127.0.0.1',
      port: 0,
      routing: new RoutingTable(() => cp.store.routeRows(), { refreshMs: config.gateway.refreshMs }),
      apiKeys: [],
    });
    await registerNode(cp, 'n1', simInventory({ gpus: 2 }));
    workers.push(await startNodeWorker(temporal.address, 'n1', pids, { cp }));
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    await waitFor(async () => (await cp.store.listReplicas(MODEL)).filter((r) => r.state === 'ready').length === 2, {
      timeoutMs: 60_000,
      what: 'both replicas ready on n1',
    });
    for (const id of ['n2', 'n3']) {
      await registerNode(cp, id, simInventory({ gpus: 1 }));
      workers.push(await startNodeWorker(temporal.address, id, pids, { cp }));
    }
  }, 180_000);

  afterAll(async () => {
    second?.kill('SIGKILL');
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
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test('kill -9 one control worker and restart Temporal mid-drain: the drain completes, no request fails', async () => {
    await waitRoutable(gateway.url, MODEL);
    const load = startLoad(gateway.url, MODEL, { clients: 3 });
    const handle = await cp.client.workflow.start('drainNode', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.drain('n1'),
      args: [{ nodeId: 'n1', timeoutS: 300 }],
    });
    await waitFor(async () => (await handle.query(drainProgressQuery)).current?.replacement, {
      timeoutMs: 30_000,
      what: 'the drain to start moving a replica',
    });

    second?.kill('SIGKILL');
    await temporal.stop();
    const downAt = Date.now();
    await new Promise((r) => setTimeout(r, 2000));
    temporal = await startTemporal();
    console.log(`Temporal down for ${Date.now() - downAt}ms mid-drain; one control worker killed`);

    // A drain that does not finish fails naming where it stood (not only jest's bare timeout).
    let timer: NodeJS.Timeout | undefined;
    const stuck = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          void Promise.all([
            handle.query(drainProgressQuery).catch((e: Error) => `query failed: ${e.message}`),
            cp.store
              .listReplicas(MODEL)
              .then((rs) =>
                rs.map((x) => ({ id: x.id, state: x.state, reason: x.reason, on: x.shards.map((sh) => sh.nodeId) })),
              ),
          ]).then(([p, rs]) =>
            reject(
              new Error(
                `the drain did not complete within 150s of the restart; progress ${JSON.stringify(p)}; replicas ${JSON.stringify(rs)}`,
              ),
            ),
          ),
        150_000,
      );
    });
    const r = (await Promise.race([handle.result(), stuck]).finally(() => clearTimeout(timer))) as DrainResult;
    const s = await load.stop();
    console.log(
      `drain completed after the restart: moved ${r.moved.join(', ')}; requests ${s.ok} ok, ${s.failed} failed`,
    );
    // A replica whose shard heartbeat timed out during Temporal's restart may leave n1 by a rebuild (n1 is
    // cordoned) before the drain reaches it; either way none may be left on n1 and both must serve elsewhere.
    expect(r.moved.length).toBeGreaterThanOrEqual(1);
    expect({ failed: s.failed, failures: s.failures }).toEqual({ failed: 0, failures: [] });
    const ready = (await cp.store.listReplicas(MODEL)).filter((x) => x.state === 'ready');
    expect(ready).toHaveLength(2);
    expect(ready.flatMap((x) => x.shards.map((sh) => sh.nodeId)).sort()).toEqual(['n2', 'n3']);
  }, 240_000);
});
