/** The node agent: discovers the node, registers and heartbeats with the control plane, runs the node worker on `node-<id>`. */
import { NativeConnection, Worker } from '@temporalio/worker';
import { createNodeActivities } from '../activities/node';
import { resolveFabrics, parseFabricFlag } from '../lib/fabrics';
import { readCpuFlags } from '../lib/hardware/cpu';
import { runCommand } from '../lib/hardware/exec';
import { readIbAdapters } from '../lib/hardware/infiniband';
import { queryGpus } from '../lib/hardware/nvidia';
import { LlmgwError } from '../lib/errors';
import { nodeQueue } from '../lib/names';
import { simEngineArgv } from '../lib/sim/argv';
import type { EngineName, NodeId, NodeInventory } from '../lib/types';

export interface AgentOptions {
  nodeId: NodeId;
  /** Control plane base URL, e.g. http://127.0.0.1:7443 */
  server: string;
  nvidiaSmi: string;
  /** sysfs root holding class/infiniband */
  ibRoot: string;
  cpuinfo: string;
  /** `--fabric` values as given */
  fabrics: string[];
  /** Address the gateway and other ranks reach this node's engines on */
  advertiseHost: string;
  engines: EngineName[];
  /** A node declared to have no GPU: skip nvidia-smi */
  noGpu: boolean;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface Agent {
  inventory: NodeInventory;
  close(): Promise<void>;
}

/** Everything the node reports about itself. Fails loudly when nvidia-smi is missing or fails. */
export async function discover(opts: AgentOptions): Promise<NodeInventory> {
  let gpus: NodeInventory['gpus'] = [];
  if (!opts.noGpu) {
    const r = await queryGpus(opts.nvidiaSmi, runCommand);
    if (r.kind === 'failed') throw new LlmgwError('LLMGW_NVIDIA_SMI_FAILED', `${r.reason} (or pass --no-gpu for a node that has none)`);
    gpus = r.gpus;
  }
  const adapters = await readIbAdapters(opts.ibRoot);
  const fabrics = resolveFabrics(opts.fabrics.map(parseFabricFlag), adapters);
  const cpuFlags = await readCpuFlags(opts.cpuinfo);
  return { gpus, adapters, fabrics, cpuFlags, engines: opts.engines, host: opts.advertiseHost };
}

async function post<T>(url: string, body: unknown): Promise<{ status: number; body: T }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(5000) });
  return { status: res.status, body: (await res.json()) as T };
}

interface Registration { temporal: { address: string; namespace: string }; heartbeatMs: number }

/** Registers, retrying with backoff while the control plane is unreachable. */
async function register(opts: AgentOptions, inventory: NodeInventory, stopped: () => boolean): Promise<Registration> {
  let delay = 250;
  for (;;) {
    try {
      const r = await post<Registration & { error?: { message: string } }>(`${opts.server}/v1/agent/register`, { nodeId: opts.nodeId, inventory });
      if (r.status === 200) return r.body;
      throw new LlmgwError('LLMGW_BAD_REQUEST', `control plane refused registration (${r.status}): ${r.body.error?.message ?? JSON.stringify(r.body)}`);
    } catch (err) {
      if ((err as LlmgwError).code === 'LLMGW_BAD_REQUEST' || stopped()) throw err;
      opts.log('control plane not reachable yet, retrying', { server: opts.server, error: (err as Error).message, retryMs: delay });
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  }
}

/** Worker options every node worker uses (the agent's and the tests'). */
export const NODE_WORKER_OPTIONS = {
  // A stopping agent cancels its shards at once; each engine then gets its own SIGTERM grace (runShard) for
  // in-flight requests. (A grace here would only delay that cancel: the SDK cancels activities after it.)
  shutdownGraceTime: 0,
  // A cancel reaches a shard only in a heartbeat's answer; the default throttle (80% of the 10 s timeout)
  // left a stopped replica's engine running for 4-5 s after its workflow ended.
  maxHeartbeatThrottleInterval: '1s',
} as const;

/** Starts the agent: discovery, registration, heartbeat loop and node worker. */
export async function startAgent(opts: AgentOptions): Promise<Agent> {
  const inventory = await discover(opts);
  let closing = false;
  const reg = await register(opts, inventory, () => closing);
  opts.log('registered', { node: opts.nodeId, gpus: inventory.gpus.length, fabrics: inventory.fabrics, temporal: reg.temporal.address });

  const connection = await NativeConnection.connect({ address: reg.temporal.address });
  const worker = await Worker.create({
    connection,
    namespace: reg.temporal.namespace,
    taskQueue: nodeQueue(opts.nodeId),
    activities: createNodeActivities({
      nodeId: opts.nodeId,
      engineArgv: (engine) => (engine === 'sim' ? simEngineArgv() : []),
      log: opts.log,
    }),
    ...NODE_WORKER_OPTIONS,
  });
  const running = worker.run();

  const beat = setInterval(() => {
    void post(`${opts.server}/v1/agent/heartbeat`, { nodeId: opts.nodeId }).then(async (r) => {
      if (r.status === 404) await register(opts, inventory, () => closing);
    }).catch((err: Error) => opts.log('heartbeat failed', { error: err.message }));
  }, reg.heartbeatMs);

  return {
    inventory,
    async close(): Promise<void> {
      closing = true;
      clearInterval(beat);
      // The SDK may already be draining it (its own signal handling in other embeddings).
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
      await connection.close();
    },
  };
}
