/**
 * The node worker: the agent's Temporal worker on `node-<id>`, connected through Temporal's front door with the
 * node's certificate. Its connection is replaced under it — to a renewed certificate, or to the door of another
 * control plane after a failover — while it runs: its shards' activities run on, untouched.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import type { NodeTemporal } from '../../gateway/control/contract';
import { nodeQueue } from '../../lib/names';
import type { TlsCredentials } from '../../lib/tls-client';

/**
 * The connection of the node's worker: to Temporal's front door with the node's certificate (mtls), trusting the
 * door by the cluster CA; plain only where the control plane says the node may reach Temporal itself (tests).
 */
export async function nodeConnection(temporal: NodeTemporal, tls: TlsCredentials): Promise<NativeConnection> {
  return shareCallContext(
    await NativeConnection.connect({
      address: temporal.address,
      ...(temporal.mtls
        ? {
            tls: {
              serverRootCACertificate: Buffer.from(tls.caPem),
              clientCertPair: { crt: Buffer.from(tls.certPem), key: Buffer.from(tls.keyPem) },
            },
          }
        : {}),
    }),
  );
}

/**
 * One call-context storage for every node connection of this process. The SDK gives each NativeConnection an
 * AsyncLocalStorage of its own, enabled by the connection's first activity (the worker runs each activity under its
 * client's abort signal), and never disabled. On Node 20 every async resource a process creates, each promise
 * included, is copied into every enabled AsyncLocalStorage, so a process of N agents paid N copies per promise:
 * quadratic in agents per process. `llmgw sim-fleet` with 99 nodes in one process spent 159 of its 423 ms a second
 * in that copy (async_hooks `_propagate`), and a real agent gained one more storage at every certificate renewal and
 * control-plane failover (each a new connection). The storage holds a request's deadline, metadata and abort signal
 * for the scope they were set in; shared, a scope opened through one connection reaches another's requests only if
 * those are made inside it, which a node's activities never do (they make no Temporal calls).
 */
const SHARED_CALL_CONTEXT: NativeConnection['callContextStorage'] = new AsyncLocalStorage();

/** `c` with the process's shared call-context storage instead of its own (above). */
function shareCallContext(c: NativeConnection): NativeConnection {
  Object.defineProperty(c, 'callContextStorage', { value: SHARED_CALL_CONTEXT, writable: false });
  return c;
}

/** Worker options every node worker uses (the agent's and the tests'). */
export const NODE_WORKER_OPTIONS = {
  // A stopping agent cancels its shards at once: each leaves its engine for the next agent (LLMGW_AGENT_STOPPED)
  // or, with --stop-engines-on-exit, gives it its SIGTERM grace. (A grace here would only delay that cancel.)
  shutdownGraceTime: 0,
  // A cancel reaches an activity only in a heartbeat's answer: a weights fetch, a listen wait or an install that
  // heartbeats every second or two is cancelled within a second (the default throttle, 80% of the heartbeat
  // timeout, would take up to 24 s). runShard heartbeats only every SHARD_HEARTBEAT_S (30 s) and is stopped by
  // stopShard, not by a cancel, so this throttle does not multiply its heartbeats.
  maxHeartbeatThrottleInterval: '1s',
  // Two long polls instead of the SDK's ten: a node's queue sees a handful of tasks a day (a shard start, a stop, a
  // weights fetch), each picked up within one poll's round trip, while every idle poll is a request Temporal's
  // frontend holds open against its per-namespace cap (frontend.namespaceCount, 1,200 by default: ten from each of
  // 200 nodes passed it, docs/architecture.md, Scale). Said as a poller behaviour: SDK 1.24 still declares
  // maxConcurrentActivityTaskPolls but never reads it (test/unit/node-worker-options.test.ts).
  activityTaskPollerBehavior: { type: 'simple-maximum', maximum: 2 },
} as const satisfies Partial<WorkerOptions>;

/** What the node worker runs on: the registration's Temporal, the node, its activities and the agent's state. */
export interface NodeWorkerOptions {
  nodeId: string;
  /** Where the control plane told the node to reach Temporal */
  temporal: NodeTemporal;
  /** The node's certificate now (a move to another door presents it) */
  tls: TlsCredentials;
  /** The first connection (made with the node's current certificate) */
  connection: NativeConnection;
  activities: object;
  /** True once the agent is closing: nothing moves any more */
  closing: () => boolean;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

/** The running node worker, wherever renewals and failovers have moved its connection. */
export interface NodeWorker {
  /** Moves the worker to a connection that presents `creds` (a renewed certificate); mtls only. */
  renewed(creds: TlsCredentials): Promise<void>;
  /**
   * The door a control plane named (a heartbeat's answer): when it is not the one the worker uses — the agent
   * failed over to another control plane — the worker moves there. One move at a time; a failed one is logged and
   * tried again at the next call.
   */
  follow(temporal: NodeTemporal): void;
  /** Stops polling and waits for the worker to end; its connection stays open. */
  stop(): Promise<void>;
  /** Closes the worker's connection (after stop). */
  disconnect(): Promise<void>;
}

/** Starts the node worker on `o.connection`; resolves once it runs. */
export async function startNodeWorker(o: NodeWorkerOptions): Promise<NodeWorker> {
  const at = { conn: o.connection, temporal: o.temporal, tls: o.tls };
  const worker = await Worker.create({
    connection: at.conn,
    namespace: o.temporal.namespace,
    taskQueue: nodeQueue(o.nodeId),
    activities: o.activities,
    ...NODE_WORKER_OPTIONS,
  });
  const running = worker.run();
  let moving: Promise<unknown> = Promise.resolve();
  let busy = false;
  let failedTo: string | null = null;

  /**
   * Replaces the worker's connection without stopping it (the SDK swaps its core client): polls, heartbeats and
   * answers go the new way from the next call on, and the activities running now — the shards — keep running and
   * heartbeating. The door the worker reaches next judges their task tokens from MySQL (docs/identity.md).
   */
  const move = (temporal: NodeTemporal, tls: TlsCredentials): Promise<boolean> => {
    const step = moving.then(async () => {
      if (o.closing()) return false;
      const next = await nodeConnection(temporal, tls);
      if (o.closing()) {
        await next.close();
        return false;
      }
      const old = at.conn;
      worker.connection = next;
      Object.assign(at, { conn: next, temporal, tls });
      await old.close().catch(() => undefined);
      return true;
    });
    moving = step.catch(() => undefined);
    return step;
  };

  return {
    async renewed(creds) {
      if (!at.temporal.mtls) return;
      if (await move(at.temporal, creds))
        o.log('node worker moved to the renewed certificate', { temporal: at.temporal.address });
    },
    follow(temporal) {
      if (busy || o.closing() || (temporal.address === at.temporal.address && temporal.mtls === at.temporal.mtls))
        return;
      busy = true;
      const from = at.temporal.address;
      void move(temporal, at.tls)
        .then(
          (moved) => {
            failedTo = null;
            if (moved)
              o.log('node worker moved to the door of the control plane in use; its shards run on', {
                level: 'warn',
                from,
                to: temporal.address,
              });
          },
          (err: Error) => {
            if (failedTo !== temporal.address)
              o.log(
                'NODE WORKER NOT MOVED to the door of the control plane in use; trying again at the next heartbeat',
                { level: 'error', from, to: temporal.address, error: err.message },
              );
            failedTo = temporal.address;
          },
        )
        .finally(() => void (busy = false));
    },
    async stop() {
      await moving;
      // The SDK may already be draining it (its own signal handling in other embeddings).
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
    },
    disconnect: () => at.conn.close(),
  };
}
