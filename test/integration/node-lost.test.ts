/**
 * A lost node, judged by the control plane: a replica placed there is told at once and rebuilt elsewhere — also
 * while its shard had not even started (its weights not yet fetched: nothing on the lost node will ever answer).
 * Real Temporal, real MariaDB, the real control plane with its node liveness; the nodes are registrations whose
 * heartbeats the test stops (no worker runs on them, so the shards stay scheduled, as on a node that died).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { QUEUES, workflowIds } from '../../lib/names';
import type { ReplicaRecord } from '../../lib/types';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { registerNode, simInventory, stopHeartbeats } from '../helpers/node-workers';
import { closeCertClients } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const MODEL = 'far';

describe('a node lost by every signal', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  const replica = async (): Promise<ReplicaRecord | undefined> =>
    (await cp.store.listReplicas(MODEL)).find((r) => r.state !== 'stopped');

  beforeAll(async () => {
    temporal = await startTestTemporal();
    // A file source: each node fetches (here: checks) the weights before its engine starts.
    const gguf = join(tmpdir(), `llmgw-node-lost-${process.pid}.gguf`);
    writeFileSync(gguf, 'GGUF');
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: gguf,
          replicas: 1,
          profiles: [{ name: 'cpu', engine: 'llamacpp', nodes: 1, gpusPerNode: 0, args: [] }],
        },
      ],
    });
    config = { ...config, engines: { ...config.engines, llamacpp: '' } };
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
    await cp?.close();
    stopHeartbeats();
    await closeCertClients();
    await temporal?.stop();
    if (config) await dropDatabase(config.mysql.url);
  });

  test('its replica, still fetching weights there, is rebuilt on another node', async () => {
    const inventory = { ...simInventory({ fabric: false }), engines: ['llamacpp' as const] };
    await registerNode(cp, 'far-n1', inventory);
    await registerNode(cp, 'far-n2', inventory);
    expect(await cp.store.setNodeState('far-n2', 'cordoned')).toBe(true);
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    await waitFor(
      async () => {
        const r = await replica();
        return r?.state === 'starting' && r.shards[0]?.nodeId === 'far-n1';
      },
      { timeoutMs: 30_000, what: 'the replica placed on far-n1 (far-n2 cordoned)' },
    );

    await cp.store.setNodeState('far-n2', 'ready');
    const lostAt = Date.now();
    stopHeartbeats(['far-n1']);
    const down = await waitFor(
      async () => (await cp.store.recentEvents(100)).find((e) => e.kind === 'node.down' && e.nodeId === 'far-n1'),
      { timeoutMs: 30_000, what: 'far-n1 judged lost' },
    );
    expect(down.message).toMatch(
      /node lost: no agent heartbeat for \d+s, no call through the door, (its door and )?engine ports [\d,]+ on 127.0.0.1 refuse connections/,
    );
    expect(down.message).toContain(`rebuilding ${MODEL}-0 elsewhere`);
    const moved = await waitFor(
      async () => {
        const r = await replica();
        return r?.state === 'starting' && r.shards[0]?.nodeId === 'far-n2' ? r : undefined;
      },
      { timeoutMs: 30_000, what: 'the replica placed again, on far-n2' },
    );
    console.log(
      `node lost: judged after ${down.at.getTime() - lostAt} ms, placed on far-n2 after ${Date.now() - lostAt} ms`,
    );
    expect(moved.reason).toBeNull();
    const events = (await cp.store.recentEvents(100))
      .filter((e) => e.replicaId === `${MODEL}-0` && e.kind === 'replica.rebuilding')
      .map((e) => e.message);
    expect(events.some((m) => /far-n1: node lost/.test(m))).toBe(true);
  }, 120_000);
});
