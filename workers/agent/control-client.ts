/**
 * The agent's side of the control plane's agent API, over the node's mTLS client: registration (retried while
 * the control plane is unreachable), the heartbeat loop, and the shards placed on this node.
 */
import type { AssignedShard } from '../../activities/node/gc';
import type { AgentShards, ErrorBody, RegisterRequest, Registration } from '../../gateway/control/contract';
import { LlmgwError } from '../../lib/errors';
import type { TlsClient } from '../../lib/tls-client';
import type { NodeInventory } from '../../lib/types';
import type { AgentOptions } from './options';

/** POSTs `body` as JSON to `url` (5 s timeout); the status and the parsed answer, whatever the status. */
export async function post<T>(client: TlsClient, url: string, body: unknown): Promise<{ status: number; body: T }> {
  const res = await client.fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(5000) });
  return { status: res.status, body: (await res.json()) as T };
}

/** The shards the control plane at `server` has placed on node `nodeId` (asked over `client`'s mTLS). */
export async function assignedShards(client: TlsClient, server: string, nodeId: string): Promise<AssignedShard[]> {
  const res = await client.fetch(`${server}/v1/agent/shards?node=${encodeURIComponent(nodeId)}`, { signal: AbortSignal.timeout(5000) });
  if (res.status !== 200) throw new Error(`GET /v1/agent/shards answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as AgentShards).shards;
}

/** Registers, retrying with backoff while the control plane is unreachable. */
export async function register(client: TlsClient, opts: AgentOptions, inventory: NodeInventory, stopped: () => boolean): Promise<Registration> {
  let delay = 250;
  for (;;) {
    try {
      const r = await post<Registration & ErrorBody>(client, `${opts.server}/v1/agent/register`, { nodeId: opts.nodeId, inventory } satisfies RegisterRequest);
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

/**
 * Heartbeats every `heartbeatMs`; a control plane that no longer knows the node (404) gets a new registration,
 * and one that refuses the node's certificate is logged.
 */
export function startHeartbeat(client: TlsClient, opts: AgentOptions, inventory: NodeInventory, heartbeatMs: number, stopped: () => boolean): { stop(): void } {
  const beat = setInterval(() => {
    void post<ErrorBody>(client, `${opts.server}/v1/agent/heartbeat`, { nodeId: opts.nodeId }).then(async (r) => {
      if (r.status === 404) await register(client, opts, inventory, stopped);
      else if (r.status === 401 || r.status === 403) opts.log('control plane refused this node\'s certificate', { status: r.status, error: r.body.error?.message });
    }).catch((err: Error) => opts.log('heartbeat failed', { error: err.message }));
  }, heartbeatMs);
  return { stop: () => clearInterval(beat) };
}
