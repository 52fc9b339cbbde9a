/**
 * A replica's health wait that ended on llmgw's own path — its heartbeat timed out (the control plane's waits worker
 * silent, as a starved control plane is), or its worker shut down under it (a control plane restarting) — waits
 * again instead of rebuilding the replica: its engine started, nothing proved it gone.
 * Real Temporal, MariaDB, node worker and sim engine process; the waits' queue is served first by a worker that
 * takes the wait and never heartbeats, then by one running the control plane's own activities.
 */
import { Context } from '@temporalio/activity';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createControlActivities } from '../../activities/control';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { QUEUES, workflowIds } from '../../lib/names';
import { pidAlive } from '../../lib/process';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { registerNode, simInventory, startNodeWorker, stopSimCluster, type NodeWorker } from '../helpers/node-workers';
import { waitFor } from '../helpers/wait';

const MODEL = 'hw';
const REPLICA = `${MODEL}-0`;

describe('a health wait that timed out on its heartbeat, or lost its worker, waits again: no rebuild', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let conn: NativeConnection;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();
  const waitWorkers: { worker: Worker; run: Promise<void> }[] = [];

  const startWaits = async (activities: object): Promise<{ worker: Worker; run: Promise<void> }> => {
    const worker = await Worker.create({
      connection: conn,
      taskQueue: QUEUES.controlWait,
      activities,
      shutdownGraceTime: '1s',
    });
    const w = { worker, run: worker.run() };
    waitWorkers.push(w);
    return w;
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: 'sim://hw',
          replicas: 1,
          profiles: [{ name: 'one', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '0'] }],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() }, waits: false });
    conn = await NativeConnection.connect({ address: temporal.address });
  });

  afterAll(async () => {
    for (const w of waitWorkers) {
      if (w.worker.getState() === 'RUNNING') w.worker.shutdown();
      await w.run.catch(() => undefined);
    }
    await conn?.close();
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
  });

  test('the engine serves through a silent wait (heartbeat timeout), and the next wait records it ready', async () => {
    // Takes the wait and says nothing until it is cancelled: what Temporal sees of a control plane too starved to
    // heartbeat.
    const silent = await startWaits({
      waitServing: async (): Promise<never> => {
        await Context.current().cancelled;
        throw new Error('cancelled');
      },
    });
    await registerNode(cp, 'hw-n1', simInventory());
    workers.push(await startNodeWorker(temporal.address, 'hw-n1', pids));
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    const replica = cp.client.workflow.getHandle(workflowIds.replica(REPLICA));
    const waitTimedOut = async (): Promise<true | undefined> => {
      const events = (await replica.fetchHistory().catch(() => null))?.events ?? [];
      return events.some((e) => e.activityTaskTimedOutEventAttributes) ? true : undefined;
    };
    // The wait's heartbeat timeout is 30 s (workflows/proxies.ts, serving).
    await waitFor(waitTimedOut, { timeoutMs: 60_000, what: "the silent health wait's heartbeat timeout" });
    const enginePid = pids.get(`${REPLICA}#0`);
    expect(enginePid).toBeGreaterThan(0);
    expect(pidAlive(enginePid as number)).toBe(true);
    expect((await cp.store.listReplicas(MODEL)).find((r) => r.id === REPLICA)?.state).toBe('starting');

    silent.worker.shutdown();
    await silent.run;
    await startWaits(
      createControlActivities({
        store: cp.store,
        client: cp.client,
        enginePorts: config.enginePorts,
        drainGraceS: config.drain.graceS,
        gatewayRefreshMs: config.gateway.refreshMs,
      }),
    );
    const ready = await waitFor(
      async () => {
        const r = (await cp.store.listReplicas(MODEL)).find((x) => x.id === REPLICA);
        return r?.state === 'ready' ? r : undefined;
      },
      { timeoutMs: 30_000, what: 'the replica to be recorded ready by the second wait' },
    );
    expect(ready.endpoint).toBeTruthy();
    // The same engine process: nothing was stopped, placed again or rebuilt.
    expect(pids.get(`${REPLICA}#0`)).toBe(enginePid);
    expect(pidAlive(enginePid as number)).toBe(true);
    const events = await cp.store.recentEvents(200);
    expect(events.filter((e) => e.replicaId === REPLICA).map((e) => e.kind)).not.toContain('replica.rebuilding');
    const history = (await replica.fetchHistory()).events ?? [];
    const waits = history.filter(
      (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'waitServing',
    ).length;
    // The silent worker may also have taken the second wait, and failed it as it shut down: waited again too.
    expect(waits).toBeGreaterThanOrEqual(2);
    expect(
      history.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'runShard'),
    ).toHaveLength(1);
  }, 120_000);
});
