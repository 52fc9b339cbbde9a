/** Sim nodes inside a test process: registration with the control plane and a real node worker on `node-<id>`. */
import { NativeConnection, Worker } from '@temporalio/worker';
import { createNodeActivities } from '../../activities/node';
import type { Client } from '@temporalio/client';
import { nodeQueue, workflowIds } from '../../lib/names';
import { AGENT_HEARTBEAT_MS } from '../../lib/liveness';
import { simEngineArgv } from '../../lib/sim/argv';
import type { NodeInventory } from '../../lib/types';
import type { TlsCredentials } from '../../lib/tls-client';
import { assignedShards } from '../../workers/agent/control-client';
import { ControlPlanes } from '../../workers/agent/control-planes';
import { NODE_WORKER_OPTIONS, nodeConnection } from '../../workers/agent/worker';
import type { ControlPlane } from '../../workers/control/index';
import { certClient, closeCertClients } from './tls';

/** A node's inventory for tests: `gpus` fake A100s, optionally on fabric ib-a, offering the sim engine. */
export const simInventory = (o: { gpus?: number; fabric?: boolean } = {}): NodeInventory => ({
  gpus: Array.from({ length: o.gpus ?? 1 }, (_, index) => ({
    index,
    name: 'NVIDIA A100-SXM4-80GB',
    memoryMiB: 81920,
    uuid: `GPU-${Math.random()}`,
  })),
  adapters: [],
  fabrics: o.fabric === false ? {} : { 'ib-a': ['mlx5_0', 'mlx5_1'] },
  cpuFlags: ['avx2'],
  engines: ['sim'],
  host: '127.0.0.1',
});

/** Heartbeat loops of registered test nodes, by node id (one each, however often a node registers). */
const beats = new Map<string, NodeJS.Timeout>();

/**
 * Registers a node with the control plane over mTLS with a certificate for `nodeId` (fails the test on anything
 * but 200), then heartbeats for it every AGENT_HEARTBEAT_MS as its agent would, until stopHeartbeats(): the
 * control plane's node liveness judges a silent node by its engines, and a test node must not look lost.
 */
export async function registerNode(
  cp: Pick<ControlPlane, 'url' | 'config' | 'store'>,
  nodeId: string,
  inventory: NodeInventory,
): Promise<void> {
  const { fetch } = await certClient(cp.config, cp.store, nodeId);
  const res = await fetch(`${cp.url}/v1/agent/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ nodeId, inventory }),
  });
  if (res.status !== 200) throw new Error(`registering ${nodeId}: HTTP ${res.status} ${await res.text()}`);
  clearInterval(beats.get(nodeId));
  const beat = setInterval(
    () =>
      void fetch(`${cp.url}/v1/agent/heartbeat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ nodeId }),
      }).catch(() => undefined),
    AGENT_HEARTBEAT_MS,
  );
  beat.unref();
  beats.set(nodeId, beat);
}

/** Stops the heartbeats of registered test nodes: all of them, or those named (a test that loses a node). */
export function stopHeartbeats(nodeIds: string[] = [...beats.keys()]): void {
  for (const id of nodeIds) {
    clearInterval(beats.get(id));
    beats.delete(id);
  }
}

export interface NodeWorker {
  nodeId: string;
  /** Engine pids by `<replica>#<rank>`, latest launch wins. */
  pids: Map<string, number>;
  /** Settles when the worker stops: null after stop(), the error it failed with otherwise. */
  ended: Promise<Error | null>;
  stop(): Promise<void>;
}

/**
 * Runs a node worker for `nodeId` against Temporal at `address`, with sim engines as real processes. With
 * `cp` it also does what the agent does beside its worker, over mTLS with the node's certificate: heartbeats to
 * that control plane every second, and asks it which shards stay placed here (so an engine outlives a Temporal
 * restart, as under a real agent). With `door`, `address` is Temporal's front door and the worker connects to it
 * as the agent does, with these credentials (the node's certificate). With `stateDir` its engines outlive the worker
 * (as under an agent), and a worker started again on the same dir adopts them.
 */
export async function startNodeWorker(
  address: string,
  nodeId: string,
  pids = new Map<string, number>(),
  o: {
    cp?: Pick<ControlPlane, 'url' | 'config' | 'store'>;
    door?: TlsCredentials;
    queue?: string;
    stateDir?: string;
    onLog?: (msg: string, fields?: Record<string, unknown>) => void;
  } = {},
): Promise<NodeWorker> {
  const conn = o.door
    ? await nodeConnection({ address, namespace: 'default', mtls: true }, o.door)
    : await NativeConnection.connect({ address });
  const stopping = new AbortController();
  const cpUrl = o.cp?.url;
  const tls = o.cp ? await certClient(o.cp.config, o.cp.store, nodeId) : undefined;
  const control = cpUrl && tls ? new ControlPlanes({ servers: [cpUrl], client: tls.client }) : undefined;
  const worker = await Worker.create({
    ...NODE_WORKER_OPTIONS,
    connection: conn,
    taskQueue: o.queue ?? nodeQueue(nodeId),
    activities: createNodeActivities({
      nodeId,
      engineArgv: () => simEngineArgv(),
      stopGraceMs: 3000,
      ...(o.stateDir ? { stateDir: o.stateDir } : {}),
      ...(control ? { assigned: () => assignedShards(control, nodeId), stopping: stopping.signal } : {}),
      log: (msg, f) => {
        if (msg === 'shard started') pids.set(`${f?.replica}#${f?.rank}`, Number(f?.pid));
        o.onLog?.(msg, f);
      },
    }),
  });
  const beat =
    cpUrl && tls
      ? setInterval(
          () =>
            void tls
              .fetch(`${cpUrl}/v1/agent/heartbeat`, {
                method: 'POST',
                headers: { 'content-type': 'application/json' },
                body: JSON.stringify({ nodeId }),
              })
              .catch(() => undefined),
          AGENT_HEARTBEAT_MS,
        )
      : undefined;
  const running = worker.run();
  const ended = running.then(
    () => null,
    (err: Error) => err,
  );
  let stopped: Promise<void> | undefined;
  return {
    nodeId,
    pids,
    ended,
    stop() {
      stopped ??= (async () => {
        clearInterval(beat);
        stopping.abort();
        if (worker.getState() === 'RUNNING') worker.shutdown();
        await running.catch(() => undefined);
        await conn.close();
      })();
      return stopped;
    },
  };
}

/** Tears down what a drain/rebuild test started: its workflows, node workers, engines, gateway, control plane, Temporal, database. */
export async function stopSimCluster(o: {
  cp?: { client: Client; store: { listReplicas(model?: string): Promise<{ id: string }[]> }; close(): Promise<void> };
  model: string;
  workflows: string[];
  workers: NodeWorker[];
  pids: Map<string, number>;
  gateway?: { close(): Promise<void> };
  temporal?: { stop(): Promise<void> };
  mysqlUrl: string;
  dropDatabase: (url: string) => Promise<void>;
}): Promise<void> {
  const { cp } = o;
  const ids = [
    ...o.workflows,
    ...((await cp?.store.listReplicas(o.model)) ?? []).map((r) => workflowIds.replica(r.id)),
  ];
  for (const id of ids)
    await cp?.client.workflow
      .getHandle(id)
      .terminate()
      .catch(() => undefined);
  for (const w of o.workers) await w.stop();
  for (const pid of o.pids.values())
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  await o.gateway?.close();
  await cp?.close();
  stopHeartbeats();
  await closeCertClients();
  await o.temporal?.stop();
  await o.dropDatabase(o.mysqlUrl);
}
