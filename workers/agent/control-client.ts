/**
 * The agent's side of the control plane's agent API, over its control planes (control-planes.ts: mTLS, failover):
 * registration (retried while no control plane is reachable), the heartbeat loop, and the shards placed on this node.
 */
import type { AssignedShard } from '../../activities/node/gc';
import type {
  AgentShards,
  ErrorBody,
  HeartbeatAnswer,
  NodeTemporal,
  RegisterRequest,
  Registration,
} from '../../gateway/control/contract';
import { LlmgwError } from '../../lib/errors';
import type { NodeInventory } from '../../lib/types';
import type { ControlFetch, ControlPlanes } from './control-planes';
import type { AgentOptions } from './options';

/** POSTs `body` as JSON to `path` of the control plane in use; the status and the parsed answer, whatever the status. */
export async function post<T>(
  control: ControlFetch,
  path: string,
  body: unknown,
): Promise<{ status: number; body: T }> {
  const res = await control.fetch(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as T };
}

/** The shards the control plane has placed on node `nodeId`. */
export async function assignedShards(control: ControlFetch, nodeId: string): Promise<AssignedShard[]> {
  const res = await control.fetch(`/v1/agent/shards?node=${encodeURIComponent(nodeId)}`);
  if (res.status !== 200) throw new Error(`GET /v1/agent/shards answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as AgentShards).shards;
}

/** Registers, retrying with backoff while no control plane is reachable. */
export async function register(
  control: ControlPlanes,
  opts: AgentOptions,
  inventory: NodeInventory,
  stopped: () => boolean,
  afterCrash = false,
): Promise<Registration> {
  let delay = 250;
  for (;;) {
    try {
      const r = await post<Registration & ErrorBody>(control, '/v1/agent/register', {
        nodeId: opts.nodeId,
        inventory,
        afterCrash,
      } satisfies RegisterRequest);
      if (r.status === 200) return r.body;
      throw new LlmgwError(
        'LLMGW_BAD_REQUEST',
        `control plane refused registration (${r.status}): ${r.body.error?.message ?? JSON.stringify(r.body)}`,
      );
    } catch (err) {
      if ((err as LlmgwError).code === 'LLMGW_BAD_REQUEST' || stopped()) throw err;
      opts.log('control plane not reachable yet, retrying', {
        level: 'warn',
        server: control.current,
        error: (err as Error).message,
        retryMs: delay,
      });
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  }
}

/**
 * Heartbeats every `heartbeatMs` (one at a time: a slow control plane is not sent a pile); a control plane that no
 * longer knows the node (404) gets a new registration, and one that refuses the node's certificate is logged.
 * A failing heartbeat is logged when it starts failing and when it answers again, not every beat. `door` is told
 * where the answering control plane's door is (after a failover: another control plane's).
 */
export function startHeartbeat(
  control: ControlPlanes,
  opts: AgentOptions,
  inventory: NodeInventory,
  heartbeatMs: number,
  stopped: () => boolean,
  door: (temporal: NodeTemporal) => void,
): { stop(): void } {
  let inFlight = false;
  let failingSince: number | null = null;
  const failed = (error: string): void => {
    if (failingSince === null)
      opts.log('heartbeat failed; retrying every beat (the engines keep serving)', {
        level: 'warn',
        server: control.current,
        error,
      });
    failingSince ??= Date.now();
  };
  const beat = setInterval(() => {
    if (inFlight) return;
    inFlight = true;
    void post<HeartbeatAnswer & ErrorBody>(control, '/v1/agent/heartbeat', { nodeId: opts.nodeId })
      .then(async (r) => {
        if (r.status === 404) door((await register(control, opts, inventory, stopped)).temporal);
        else if (r.status === 401 || r.status === 403)
          opts.log("control plane refused this node's certificate", {
            level: 'error',
            status: r.status,
            error: r.body.error?.message,
          });
        if (r.status >= 500) return failed(`HTTP ${r.status}: ${r.body.error?.message ?? ''}`);
        // A control plane older than the answer's door says nothing of it: the worker stays where it is.
        if (r.status === 200 && r.body.temporal) door(r.body.temporal);
        if (failingSince !== null)
          opts.log('heartbeat answered again', { server: control.current, failedForMs: Date.now() - failingSince });
        failingSince = null;
      })
      .catch((err: Error) => failed(err.message))
      .finally(() => void (inFlight = false));
  }, heartbeatMs);
  return { stop: () => clearInterval(beat) };
}
