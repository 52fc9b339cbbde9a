/**
 * The node worker: the agent's Temporal worker on `node-<id>`, connected through Temporal's front door with the
 * node's certificate, and moved to a new connection when that certificate is renewed.
 */
import { NativeConnection, Worker } from '@temporalio/worker';
import type { NodeTemporal } from '../../gateway/control/contract';
import { nodeQueue } from '../../lib/names';
import type { TlsCredentials } from '../../lib/tls-client';

/**
 * The connection of the node's worker: to Temporal's front door with the node's certificate (mtls), trusting the
 * door by the cluster CA; plain only where the control plane says the node may reach Temporal itself (tests).
 */
export function nodeConnection(temporal: NodeTemporal, tls: TlsCredentials): Promise<NativeConnection> {
  return NativeConnection.connect({
    address: temporal.address,
    ...(temporal.mtls ? { tls: { serverRootCACertificate: Buffer.from(tls.caPem), clientCertPair: { crt: Buffer.from(tls.certPem), key: Buffer.from(tls.keyPem) } } } : {}),
  });
}

/** Worker options every node worker uses (the agent's and the tests'). */
export const NODE_WORKER_OPTIONS = {
  // A stopping agent cancels its shards at once: each leaves its engine for the next agent (LLMGW_AGENT_STOPPED)
  // or, with --stop-engines-on-exit, gives it its SIGTERM grace. (A grace here would only delay that cancel.)
  shutdownGraceTime: 0,
  // A cancel reaches a shard only in a heartbeat's answer; the default throttle (80% of the 10 s timeout)
  // left a stopped replica's engine running for 4-5 s after its workflow ended.
  maxHeartbeatThrottleInterval: '1s',
} as const;

/** What the node worker runs on: the registration's Temporal, the node, its activities and the agent's state. */
export interface NodeWorkerOptions {
  nodeId: string;
  /** Where the control plane told the node to reach Temporal */
  temporal: NodeTemporal;
  /** The first connection (made with the node's current certificate) */
  connection: NativeConnection;
  activities: object;
  /** True once the agent is closing: a renewal then starts no new worker */
  closing: () => boolean;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

/** The running node worker, wherever renewals have moved it. */
export interface NodeWorker {
  /** Moves the worker to a connection that presents `creds` (a renewed certificate); mtls only. */
  move(creds: TlsCredentials): Promise<void>;
  /** Stops polling and waits for the worker to end; its connection stays open. */
  stop(): Promise<void>;
  /** Closes the worker's connection (after stop). */
  disconnect(): Promise<void>;
}

/** One worker on one connection, and its run loop. */
interface Running { conn: NativeConnection; worker: Worker; running: Promise<void> }

/** Creates a node worker on `conn` and starts it polling. */
async function run(conn: NativeConnection, o: NodeWorkerOptions): Promise<Running> {
  const w = await Worker.create({ connection: conn, namespace: o.temporal.namespace, taskQueue: nodeQueue(o.nodeId), activities: o.activities, ...NODE_WORKER_OPTIONS });
  return { conn, worker: w, running: w.run() };
}

/** Stops a worker's polling and waits for its run loop to end. */
async function stop(r: Running): Promise<void> {
  // The SDK may already be draining it (its own signal handling in other embeddings).
  if (r.worker.getState() === 'RUNNING') r.worker.shutdown();
  await r.running.catch(() => undefined);
}

/** Starts the node worker on `o.connection`; resolves once it runs. */
export async function startNodeWorker(o: NodeWorkerOptions): Promise<NodeWorker> {
  let current = await run(o.connection, o);
  /**
   * A renewed certificate reaches the node worker too: a NativeConnection keeps the certificate it was made with,
   * and the door refuses the old one once it expires. A worker on a new connection polls first, then the old one
   * stops; its shards leave their engines running (LLMGW_AGENT_STOPPED) and the new worker adopts them, as across
   * an agent restart (with --stop-engines-on-exit their engines stop and are rebuilt).
   */
  const move = async (creds: TlsCredentials): Promise<void> => {
    if (!o.temporal.mtls || o.closing()) return;
    const next = await run(await nodeConnection(o.temporal, creds), o);
    if (o.closing()) {
      await stop(next);
      return next.conn.close();
    }
    const old = current;
    current = next;
    await stop(old);
    await old.conn.close();
    o.log('node worker moved to the renewed certificate', { temporal: o.temporal.address });
  };
  return { move, stop: () => stop(current), disconnect: () => current.conn.close() };
}
