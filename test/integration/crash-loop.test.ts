/**
 * A replica whose engine keeps failing backs off and says so: an engine that exits at once, and an engine that never
 * serves within the model's startTimeoutS (counted as the engine failing, not as a lost node). Real Temporal, real
 * MariaDB, real node workers and sim engine processes.
 */
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { QUEUES, workflowIds } from '../../lib/names';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { registerNode, simInventory, startNodeWorker, stopHeartbeats, type NodeWorker } from '../helpers/node-workers';
import { closeCertClients } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

describe('crash-looping replicas back off', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();
  // Every reason seen so far: the events, and the replica row's reason (a backoff's 'crash-looping' lives there).
  const seenReasons = new Map<string, Set<string>>();
  const reasons = async (model: string): Promise<string[]> => {
    const seen = seenReasons.get(model) ?? new Set<string>();
    seenReasons.set(model, seen);
    for (const e of await cp.store.recentEvents(300))
      if (e.replicaId?.startsWith(`${model}-`)) seen.add(`${e.kind}: ${e.message}`);
    for (const r of await cp.store.listReplicas(model)) if (r.reason) seen.add(`${r.state}: ${r.reason}`);
    return [...seen];
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        // The sim engine refuses this flag value and exits with code 2 at once.
        {
          name: 'crashy',
          source: 'sim://crashy',
          replicas: 0,
          profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', 'x'] }],
        },
        // Rank 0 answers 503 until rank 1 joins, and rank 1's node has no worker: it never serves.
        {
          name: 'slow',
          source: 'sim://slow',
          replicas: 0,
          startTimeoutS: 10,
          profiles: [{ name: 'tp2', engine: 'sim', nodes: 2, gpusPerNode: 1, args: [] }],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    await registerNode(cp, 'cl-n1', simInventory());
    await registerNode(cp, 'cl-n2', simInventory());
    workers.push(await startNodeWorker(temporal.address, 'cl-n1', pids));
  });

  afterAll(async () => {
    for (const m of ['crashy', 'slow']) {
      for (const r of (await cp?.store.listReplicas(m)) ?? [])
        await cp.client.workflow
          .getHandle(workflowIds.replica(r.id))
          .terminate()
          .catch(() => undefined);
      await cp?.client.workflow
        .getHandle(workflowIds.model(m))
        .terminate()
        .catch(() => undefined);
    }
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
    if (config) await dropDatabase(config.mysql.url);
  });

  const deploy = async (model: string): Promise<void> => {
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(model),
      args: [{ model }],
    });
    await cp.client.workflow.getHandle(workflowIds.model(model)).executeUpdate('scale', { args: [1] });
  };

  test('an engine that exits at once: crash-looping, 2 s doubling', async () => {
    await deploy('crashy');
    const seen = await waitFor(
      async () => {
        const all = await reasons('crashy');
        return all.some((m) => /crash-looping: failed 3 times in a row, next try in 4s/.test(m)) ? all : undefined;
      },
      {
        timeoutMs: 60_000,
        intervalMs: 200,
        what: 'crashy to say it is crash-looping, the third time with a 4 s backoff',
      },
    );
    expect(
      seen.some((m) =>
        /crash-looping: failed 2 times in a row, next try in 2s; last: engine sim for crashy-0 rank 0 on cl-n1 exited with code 2/.test(
          m,
        ),
      ),
    ).toBe(true);
    // The node is fine: it is never excluded or called lost.
    expect(seen.some((m) => /node lost|stopped heartbeating/.test(m))).toBe(false);
  }, 90_000);

  test('an engine that never serves within startTimeoutS fails as the engine, not as a lost node, and backs off', async () => {
    await deploy('slow');
    const seen = await waitFor(
      async () => {
        const all = await reasons('slow');
        return all.some((m) => /crash-looping: failed 2 times in a row/.test(m)) ? all : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 200, what: 'slow to fail its start twice and say it is crash-looping' },
    );
    expect(
      seen.some((m) => /the engine did not serve within 10s \(the model's startTimeoutS in the catalog\)/.test(m)),
    ).toBe(true);
    expect(seen.some((m) => /health check/.test(m))).toBe(false);
  }, 120_000);
});
