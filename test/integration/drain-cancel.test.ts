/**
 * A drain whose two-node replica fits nowhere else while it runs (its own rank holds the only other free node of
 * the fabric): the drain waits and says why, and offers --allow-downtime. Cancelling it (`ctl drain --cancel`) or
 * uncordoning the node ends it and stops its replacement, so the model is back at its desired count; with
 * --allow-downtime the replica moves stop-first and the drain prints how long it was out of routing. Real
 * Temporal, MariaDB, node workers, sim engine processes, the gateway role and the control API with `ctl`'s code.
 */
import type { DevServer } from '../../cli/cluster/temporal-dev';
import { controlApi, type ControlApi } from '../../cli/control-api';
import { setCordon } from '../../cli/ctl/cordon';
import { cancelDrain, drain } from '../../cli/ctl/drain';
import type { ServerConfig } from '../../config/types';
import { QUEUES, workflowIds } from '../../lib/names';
import type { NodeId, ReplicaRecord } from '../../lib/types';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { startGatewayRole, type GatewayRole } from '../../workers/gateway';
import { drainProgressQuery, formatDrainProgress, type DrainProgress } from '../../workflows/contracts/drain';
import { deploymentQuery } from '../../workflows/contracts/model';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl, TEST_API_KEY } from '../helpers/cluster-parts';
import { recordHistory } from '../helpers/histories';
import { registerNode, simInventory, startNodeWorker, stopSimCluster, type NodeWorker } from '../helpers/node-workers';
import { writeOperatorCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const MODEL = 'big';

describe('a drain of a replica nothing else can take while it runs', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let gateway: GatewayRole;
  let api: ControlApi;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();
  let cancelledRun = '';
  const live = async (): Promise<ReplicaRecord[]> =>
    (await cp.store.listReplicas(MODEL)).filter((r) => r.state !== 'stopped');
  const state = async (id: string | null | undefined): Promise<string | undefined> =>
    (await cp.store.listReplicas(MODEL)).find((r) => r.id === id)?.state;
  /** What a client sees: how many replicas of the model the gateway routes. */
  const routed = async (): Promise<number> =>
    (
      (await (
        await fetch(`${gateway.url}/health/routes`, { headers: { authorization: `Bearer ${TEST_API_KEY}` } })
      ).json()) as { models: Record<string, number> }
    ).models[MODEL] ?? 0;
  const progress = (): Promise<DrainProgress> =>
    cp.client.workflow.getHandle(workflowIds.drain('d1')).query(drainProgressQuery);
  /** Starts a drain of `d1` (not following it) and waits until its replacement waits for a placement, hint given. */
  const drainUntilWaiting = async (): Promise<DrainProgress> => {
    await drain(cp.client, {
      nodeId: 'd1' as NodeId,
      timeoutS: null,
      allowDowntime: false,
      wait: false,
      uiLink: 'ui',
      out: () => undefined,
    });
    return waitFor(
      async () => {
        const p = await progress();
        return p.current?.state === 'waiting' && /--allow-downtime/.test(p.current.hint ?? '') ? p : undefined;
      },
      { timeoutMs: 60_000, what: 'the replacement to wait for a placement and the drain to offer --allow-downtime' },
    );
  };
  /** The model at its desired count: one replica, ready and routed, and the deployment replacing nothing. */
  const expectOneServing = async (original: string): Promise<void> => {
    await waitFor(async () => (await live()).length === 1 && (await routed()) === 1, {
      timeoutMs: 20_000,
      what: 'one live replica, routed by the gateway',
    });
    expect((await live()).map((r) => [r.id, r.state])).toEqual([[original, 'ready']]);
    const dep = await cp.client.workflow.getHandle(workflowIds.model(MODEL)).query(deploymentQuery);
    expect({ desired: dep.desired, replicas: dep.replicas, replacing: dep.replacing }).toEqual({
      desired: 1,
      replicas: [original],
      replacing: [],
    });
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: 'sim://big',
          replicas: 1,
          profiles: [{ name: 'tp2', engine: 'sim', nodes: 2, gpusPerNode: 1, args: [] }],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    await writeOperatorCert(config, cp.store);
    api = controlApi(config, cp.url);
    gateway = await startGatewayRole({ config });
    for (const id of ['d1', 'd2']) {
      await registerNode(cp, id, simInventory({ gpus: 1 }));
      workers.push(await startNodeWorker(temporal.address, id, pids, { cp }));
    }
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    await waitFor(async () => (await live()).find((r) => r.state === 'ready'), {
      timeoutMs: 60_000,
      what: 'big-0 ready on d1 and d2',
    });
    // d3 is the fabric's only free node: with d1 cordoned and d2 held by big-0's own rank 1, a replacement needs two.
    await registerNode(cp, 'd3', simInventory({ gpus: 1 }));
    workers.push(await startNodeWorker(temporal.address, 'd3', pids, { cp }));
  }, 120_000);

  afterAll(async () => {
    await stopSimCluster({
      cp,
      model: MODEL,
      workflows: [workflowIds.model(MODEL), workflowIds.drain('d1')],
      workers,
      pids,
      gateway,
      temporal,
      mysqlUrl: config.mysql.url,
      dropDatabase,
    });
  }, 60_000);

  test('ctl drain --cancel stops the waiting replacement: the model is back at its desired count, the node stays cordoned', async () => {
    const [original] = (await live()).map((r) => r.id);
    const p = await drainUntilWaiting();
    const replacement = p.current?.replacement;
    expect(formatDrainProgress(p)).toMatch(
      new RegExp(
        `moving ${original} → ${replacement} waiting — no placement for big/tp2 .*fabric ib-a has 1 of 2 usable nodes .*\\[it fits once ${original} is gone: llmgw ctl drain d1 --allow-downtime moves it stop-first\\]`,
      ),
    );

    const out: string[] = [];
    cancelledRun = (await cp.client.workflow.getHandle(workflowIds.drain('d1')).describe()).runId;
    const t0 = Date.now();
    await cancelDrain(api, 'd1', (s) => out.push(s));
    console.log(`ctl drain --cancel returned after ${Date.now() - t0}ms: ${out.join('')}`);
    expect(out.join('')).toBe(
      `drain/d1 ended (cancelled): its replacement ${replacement} stopped: ${original} keeps serving\nd1 stays cordoned: llmgw ctl uncordon d1 gives it back\n`,
    );
    // When the command returns, the drain has ended and its replacement is gone.
    expect((await cp.client.workflow.getHandle(workflowIds.drain('d1')).describe()).status.name).toBe('CANCELLED');
    expect(await state(replacement)).toBe('stopped');
    await expectOneServing(original as string);
    expect(await cp.store.nodeState('d1' as NodeId)).toBe('cordoned');
    // Nothing left to cancel.
    out.length = 0;
    await cancelDrain(api, 'd1', (s) => out.push(s));
    expect(out.join('')).toBe('no drain of d1 is running\n');
  }, 120_000);

  test('ctl uncordon ends a running drain first, says so, and gives the node back', async () => {
    const [original] = (await live()).map((r) => r.id);
    const p = await drainUntilWaiting();
    const out: string[] = [];
    const t0 = Date.now();
    await setCordon(api, 'd1', 'uncordon', (s) => out.push(s));
    console.log(`ctl uncordon returned after ${Date.now() - t0}ms: ${out.join('')}`);
    expect(out.join('')).toBe(
      `drain/d1 ended (cancelled): its replacement ${p.current?.replacement} stopped: ${original} keeps serving\nd1: ready\n`,
    );
    expect(await cp.store.nodeState('d1' as NodeId)).toBe('ready');
    expect(await state(p.current?.replacement)).toBe('stopped');
    await expectOneServing(original as string);
  }, 120_000);

  test('--allow-downtime, given to the waiting drain, moves the replica stop-first and prints how long it was out of routing', async () => {
    const [original] = (await live()).map((r) => r.id);
    const p = await drainUntilWaiting();
    const replacement = p.current?.replacement;
    // The operator follows the hint: the same command with --allow-downtime joins the running drain.
    const lines: string[] = [];
    const started = Date.now();
    await drain(cp.client, {
      nodeId: 'd1' as NodeId,
      timeoutS: 120,
      allowDowntime: true,
      wait: true,
      uiLink: 'ui',
      out: (s) => lines.push(...s.split('\n').filter(Boolean)),
    });
    console.log(`stop-first move after the flag: ${Date.now() - started}ms\n${lines.join('\n')}`);
    expect(lines.some((l) => l.includes(`moving ${original} stop-first → ${replacement}`))).toBe(true);
    const last = lines.at(-1) ?? '';
    const m = new RegExp(
      `^d1: drained, 1 replica moved \\(${original}\\); ${original} was out of routing (\\d+\\.\\d)s \\(moved stop-first to ${replacement}\\); it stays cordoned`,
    ).exec(last);
    expect(m ? last : `no downtime in: ${last}`).toBe(last);
    const downS = Number(m?.[1]);
    expect(downS).toBeGreaterThan(0);
    expect(downS).toBeLessThan(30);
    await waitFor(async () => (await routed()) === 1, {
      timeoutMs: 10_000,
      what: 'the gateway to route the replacement',
    });
    const now = await live();
    expect(now.map((r) => [r.id, r.state, r.shards.map((s) => s.nodeId).sort()])).toEqual([
      [replacement, 'ready', ['d2', 'd3']],
    ]);
    const dep = await cp.client.workflow.getHandle(workflowIds.model(MODEL)).query(deploymentQuery);
    expect({ replicas: dep.replicas, replacing: dep.replacing }).toEqual({ replicas: [replacement], replacing: [] });

    // Replay fixtures of the new paths: LLMGW_RECORD_HISTORIES=1 npx jest test/integration/drain-cancel.test.ts
    recordHistory(temporal.address, 'drain-cancelled.json', workflowIds.drain('d1'), cancelledRun);
    recordHistory(temporal.address, 'drain-stop-first.json', workflowIds.drain('d1'));
    recordHistory(temporal.address, 'replica-stop-first.json', workflowIds.replica(original as string));
  }, 150_000);
});
