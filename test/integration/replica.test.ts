/**
 * A 2-node replica against a real Temporal server, real MariaDB, real node workers and real sim
 * engine processes: it serves only after the worker rank joined, and killing the worker rank's
 * process makes rank 0 stop serving (and the replica rebuild).
 */
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { QUEUES, workflowIds } from '../../lib/names';
import { pidAlive } from '../../lib/process';
import type { ReplicaRecord } from '../../lib/types';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { scaleUpdate } from '../../workflows/contracts/model';
import { nodesChangedSignal } from '../../workflows/contracts/replica';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { recordHistory } from '../helpers/histories';
import { registerNode, simInventory, startNodeWorker, stopHeartbeats, type NodeWorker } from '../helpers/node-workers';
import { closeCertClients } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

describe('a replica over two nodes of one fabric', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();

  const register = (nodeId: string): Promise<void> => registerNode(cp, nodeId, simInventory());
  const startWorker = async (nodeId: string): Promise<void> =>
    void workers.push(await startNodeWorker(temporal.address, nodeId, pids));
  const replicaRow = async (): Promise<ReplicaRecord | undefined> =>
    (await cp.store.listReplicas('pair')).find((r) => r.id === 'pair-0');
  const health = async (port: number): Promise<number> => {
    try {
      return (await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1000) })).status;
    } catch {
      return 0;
    }
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: 'pair',
          source: 'sim://pair',
          replicas: 1,
          profiles: [{ name: 'tp2', engine: 'sim', nodes: 2, gpusPerNode: 1, args: ['--tokens-per-second', '0'] }],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
  });

  afterAll(async () => {
    await cp?.client.workflow
      .getHandle(workflowIds.replica('pair-0'))
      .terminate()
      .catch(() => undefined);
    await cp?.client.workflow
      .getHandle(workflowIds.model('pair'))
      .terminate()
      .catch(() => undefined);
    for (const w of workers) await w.stop();
    for (const pid of pids.values())
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    await cp?.close();
    stopHeartbeats();
    await closeCertClients();
    await temporal?.stop();
    await dropDatabase(config.mysql.url);
  });

  test('serves only after the worker rank joined; a dead worker rank stops rank 0 and the replica rebuilds', async () => {
    await register('pair-n1');
    await startWorker('pair-n1'); // pair-n2's worker comes later: rank 1 cannot start yet
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model('pair'),
      args: [{ model: 'pair' }],
    });
    // One node is not room for two ranks: the replica waits, and the second node's registration wakes it (the
    // control plane signals every waiting replica, read by state from MySQL) rather than its next retry.
    await waitFor(async () => ((await replicaRow())?.state === 'waiting' ? true : undefined), {
      timeoutMs: 30_000,
      what: 'the replica to wait for a second node',
    });
    await register('pair-n2');
    await waitFor(
      async () => {
        const history = await cp.client.workflow.getHandle(workflowIds.replica('pair-0')).fetchHistory();
        return history.events?.some(
          (e) => e.workflowExecutionSignaledEventAttributes?.signalName === nodesChangedSignal.name,
        )
          ? true
          : undefined;
      },
      { timeoutMs: 10_000, what: "pair-n2's registration to signal the waiting replica (nodesChanged)" },
    );

    const starting = await waitFor(
      async () => {
        const r = await replicaRow();
        return r?.state === 'starting' && r.shards.length === 2 ? r : undefined;
      },
      { timeoutMs: 30_000, what: 'the replica to be placed on both nodes' },
    );
    const rank0 = starting.shards.find((s) => s.rank === 0);
    expect(rank0).toBeDefined();
    const port = rank0?.port ?? 0;
    // Rank 0 runs and answers, but is not ready while its worker rank has not joined.
    await waitFor(async () => (await health(port)) === 503, {
      timeoutMs: 20_000,
      what: 'rank 0 to answer health 503 (waiting for rank 1)',
    });
    await new Promise((r) => setTimeout(r, 1500));
    expect((await replicaRow())?.state).toBe('starting');
    expect(await health(port)).toBe(503);

    const workerStartedAt = Date.now();
    await startWorker('pair-n2');
    const ready = await waitFor(
      async () => {
        const r = await replicaRow();
        return r?.state === 'ready' ? r : undefined;
      },
      { timeoutMs: 30_000, what: 'the replica to become ready after rank 1 joined' },
    );
    expect(Date.now()).toBeGreaterThan(workerStartedAt);
    expect(ready.endpoint).toBe(`http://127.0.0.1:${port}`);
    expect(await health(port)).toBe(200);
    const chat = await fetch(`${ready.endpoint}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'pair', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chat.status).toBe(200);
    expect(((await chat.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(4);

    // Kill the worker rank's engine process: rank 0 must stop serving, the replica leaves the routing table and rebuilds.
    const workerPid = pids.get('pair-0#1');
    expect(workerPid).toBeGreaterThan(0);
    process.kill(workerPid as number, 'SIGKILL');
    await waitFor(async () => (await health(port)) !== 200, {
      timeoutMs: 10_000,
      what: 'rank 0 to stop serving after rank 1 died',
    });
    // The 'rebuilding' state may last only milliseconds (the shards are already gone); its event stays.
    const rebuilding = await waitFor(
      async () =>
        (await cp.store.recentEvents(200)).find((e) => e.replicaId === 'pair-0' && e.kind === 'replica.rebuilding'),
      { timeoutMs: 15_000, what: 'a replica.rebuilding event for pair-0' },
    );
    expect(rebuilding.message).toMatch(/shard failed: .*(rank 1|SIGKILL|exited)/);
    const rebuilt = await waitFor(
      async () => {
        const r = await replicaRow();
        return r?.state === 'ready' ? r : undefined;
      },
      { timeoutMs: 45_000, what: 'the replica to be rebuilt and ready again' },
    );

    // Scale to 0: the replica leaves the routing table, stops its engines and its workflow ends — engines first.
    const enginePids = [pids.get('pair-0#0'), pids.get('pair-0#1')].map(Number);
    expect(enginePids.every((p) => p > 0 && pidAlive(p))).toBe(true);
    const deployment = cp.client.workflow.getHandle(workflowIds.model('pair'));
    expect(await deployment.executeUpdate(scaleUpdate, { args: [0] })).toBe(0);
    await expect(deployment.executeUpdate(scaleUpdate, { args: [-1] })).rejects.toMatchObject({
      cause: { message: expect.stringMatching(/whole number from 0 to 64, got -1/) },
    });
    await cp.client.workflow.getHandle(workflowIds.replica('pair-0')).result();
    expect((await replicaRow())?.state).toBe('stopped');
    // 'stopped' means the engines are gone: no process left, nothing answering on the port.
    expect(enginePids.filter(pidAlive)).toEqual([]);
    expect(await health(rebuilt.shards.find((s) => s.rank === 0)?.port ?? 0)).toBe(0);
    expect(await cp.store.listShards()).toEqual([]);

    // Refresh the replay fixtures: LLMGW_RECORD_HISTORIES=1 npx jest test/integration/replica.test.ts
    for (const id of [workflowIds.replica('pair-0'), workflowIds.model('pair')])
      recordHistory(temporal.address, `${id.replace('/', '-')}.json`, id);
  });
});
