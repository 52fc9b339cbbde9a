/**
 * The node door's addresses. Engines bind to loopback on their node; each node's agent serves one inference
 * listener (gateway/node-door) that takes only gateway certificates and forwards to the local engine of the replica
 * a request names. A replica behind a door is routed at `https://HOST:PORT/nodes/NODE/replicas/REPLICA`: a base
 * URL like an engine's own (`${endpoint}/v1/chat/completions`, `${endpoint}/health`), whose path names the node
 * (the gateway checks the door's certificate is that node's) and the replica (the door picks the engine by it).
 */

/** The node door's port where nothing says another (`llmgw agent --door HOST:7460`; onboarding's default). */
export const NODE_DOOR_PORT = 7460;

/** HOST:PORT of a node's door at `host` (an IPv6 address in brackets). */
export function nodeDoorListen(host: string, port = NODE_DOOR_PORT): string {
  return `${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** The loopback address an engine's HTTP API binds to on a node with a door: only the node's door reaches it. */
export const ENGINE_API_HOST = '127.0.0.1';

/** Where a shard's engine listens: loopback behind a door, else the node's address (the gateways' way in). */
export function engineApiHost(l: { host: string; behindDoor?: boolean }): string {
  return l.behindDoor ? ENGINE_API_HOST : l.host;
}

/** The base URL of `replicaId` behind `nodeId`'s door at host:port. */
export function nodeDoorEndpoint(host: string, port: number, nodeId: string, replicaId: string): string {
  const h = host.includes(':') ? `[${host}]` : host;
  return `https://${h}:${port}/nodes/${encodeURIComponent(nodeId)}/replicas/${encodeURIComponent(replicaId)}`;
}

/** What a door request's path names: the node, the replica, and the engine's own path (`/v1/…`, with its query). */
export interface DoorPath {
  node: string;
  replica: string;
  rest: string;
}

const DOOR_PATH = /^\/nodes\/([^/?]+)\/replicas\/([^/?]+)(\/[^]*)?$/;

/** Parses `/nodes/NODE/replicas/REPLICA/…`, or null when a path is not of that shape. */
export function parseDoorPath(url: string): DoorPath | null {
  const m = DOOR_PATH.exec(url);
  if (!m) return null;
  try {
    return { node: decodeURIComponent(m[1] as string), replica: decodeURIComponent(m[2] as string), rest: m[3] ?? '/' };
  } catch {
    return null;
  }
}

/** The header a door sets on its own 404 (no such replica here), so the gateway never takes an engine's 404 for one. */
export const DOOR_MISS_HEADER = 'x-llmgw-door-miss';

/** A door endpoint taken apart: where to connect, which node must answer, and the path prefix of every request. */
export interface DoorEndpoint {
  host: string;
  port: number;
  node: string;
  replica: string;
  /** `/nodes/NODE/replicas/REPLICA`: prepended to the engine's path (`/v1/chat/completions`) */
  base: string;
}

/** Parses a door endpoint (`https://HOST:PORT/nodes/NODE/replicas/REPLICA`), or null when it is not one. */
export function parseDoorEndpoint(endpoint: string): DoorEndpoint | null {
  try {
    const u = new URL(endpoint);
    const base = u.pathname.replace(/\/$/, '');
    const p = u.protocol === 'https:' && !u.search ? parseDoorPath(base) : null;
    if (!p || p.rest !== '/') return null;
    return {
      host: u.hostname.replace(/^\[|\]$/g, ''),
      port: Number(u.port || 443),
      node: p.node,
      replica: p.replica,
      base,
    };
  } catch {
    return null;
  }
}
