/** The control role: MySQL, the control worker (all workflows + control activities) and the control plane API, in one process. */
import Fastify from 'fastify';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, type WorkflowBundleOption } from '@temporalio/worker';
import { createControlActivities } from '../activities/control';
import type { ServerConfig } from '../config/types';
import { controlRoutes } from '../gateway/control-app';
import { QUEUES, workflowIds } from '../lib/names';
import { openDatabase } from '../lib/store/db';
import { Store } from '../lib/store/store';
import { nodesChangedSignal } from '../workflows/contracts/replica';

export interface ControlPlaneOptions {
  config: ServerConfig;
  /** A pre-built workflow bundle (tests bundle once); default bundles workflows/ at start. */
  workflowBundle?: WorkflowBundleOption;
  /** A node unseen for this long is marked down. */
  nodeDownAfterMs?: number;
  logger?: boolean;
}

export interface ControlPlane {
  url: string;
  store: Store;
  client: Client;
  close(): Promise<void>;
}

/** Starts the control plane listener and the control worker; resolves once both are up. */
export async function startControlPlane(opts: ControlPlaneOptions): Promise<ControlPlane> {
  const { config } = opts;
  const pool = await openDatabase(config.mysql.url);
  const store = new Store(pool);
  for (const spec of config.catalog) await store.upsertModel(spec, true);

  const connection = await Connection.connect({ address: config.temporal.address });
  const client = new Client({ connection, namespace: config.temporal.namespace });
  const native = await NativeConnection.connect({ address: config.temporal.address });
  const worker = await Worker.create({
    connection: native,
    namespace: config.temporal.namespace,
    taskQueue: QUEUES.control,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath: require.resolve('../workflows') }),
    activities: createControlActivities({ store, client, enginePorts: config.enginePorts }),
  });
  const running = worker.run();

  // A node coming (back) lets waiting replicas try again now rather than at their next retry.
  const wakeWaiting = async (): Promise<void> => {
    for (const r of await store.listReplicas()) {
      if (r.state !== 'waiting') continue;
      await client.workflow.getHandle(workflowIds.replica(r.id)).signal(nodesChangedSignal).catch(() => undefined);
    }
  };
  const app = Fastify({ logger: opts.logger ?? false });
  await app.register(controlRoutes, {
    store,
    temporal: { address: config.temporal.address, namespace: config.temporal.namespace },
    heartbeatMs: 2000,
    onNodesChanged: () => void wakeWaiting().catch(() => undefined),
  });
  const downAfter = opts.nodeDownAfterMs ?? 15_000;
  const sweep = setInterval(() => {
    void store.markStaleNodesDown(downAfter).then(async (ids) => {
      for (const id of ids) await store.event({ kind: 'node.down', nodeId: id, message: `no heartbeat for ${downAfter / 1000}s` });
    }).catch(() => undefined);
  }, 2000);
  sweep.unref();
  const { host, port } = config.listeners.controlPlane;
  const url = await app.listen({ host, port });

  return {
    url,
    store,
    client,
    async close(): Promise<void> {
      clearInterval(sweep);
      await app.close();
      // The SDK may already be draining it (its own signal handling in other embeddings).
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
      await native.close();
      await connection.close();
      await pool.end();
    },
  };
}
