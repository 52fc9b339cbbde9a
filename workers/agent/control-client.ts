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
export async function register(client: TlsClient, opts: AgentOptions, inventory: NodeInventory, stopped: () => boolean, afterCrash = false): Promise<Registration> {
  let delay = 250;
  for (;;) {
    try {
      const r = await post<Registration & ErrorBody>(client, `${opts.server}/v1/agent/register`, { nodeId: opts.nodeId, inventory, afterCrash } satisfies RegisterRequest);
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
 * Heartbeats every `heartbeatMs` (one at a time: a slow control plane is not sent a pile); a control plane that no
 * longer knows the node (404) gets a new registration, and one that refuses the node's certificate is logged.
 * A failing heartbeat is logged when it starts failing and when it answers again, not every beat.
 */
export function startHeartbeat(client: TlsClient, opts: AgentOptions, inventory: NodeInventory, heartbeatMs: number, stopped: () => boolean): { stop(): void } {
  let inFlight = false;
  let failingSince: number | null = null;
  const failed = (error: string): void => {
    if (failingSince === null) opts.log('heartbeat failed; retrying every beat (the engines keep serving)', { server: opts.server, error });
    failingSince ??= Date.now();
  };
  const beat = setInterval(() => {
    if (inFlight) return;
    inFlight = true;
    void post<ErrorBody>(client, `${opts.server}/v1/agent/heartbeat`, { nodeId: opts.nodeId }).then(async (r) => {
      if (r.status === 404) await register(client, opts, inventory, stopped);
      else if (r.status === 401 || r.status === 403) opts.log('control plane refused this node\'s certificate', { status: r.status, error: r.body.error?.message });
      if (r.status >= 500) return failed(`HTTP ${r.status}: ${r.body.error?.message ?? ''}`);
      if (failingSince !== null) opts.log('heartbeat answered again', { server: opts.server, failedForMs: Date.now() - failingSince });
      failingSince = null;
    }).catch((err: Error) => failed(err.message)).finally(() => void (inFlight = false));
  }, heartbeatMs);
  return { stop: () => clearInterval(beat) };
}
