/**
 * The local cluster's ports, checked before anything starts: a port another process holds is refused, naming that
 * process, instead of a role dying on EADDRINUSE while the cluster says "up" (its health checks answered by the
 * stranger on the port).
 */
import { LlmgwError } from '../../lib/errors';
import { describePortHolder, portFree, portHolder } from '../../lib/port-holder';

/** Every listener of the local cluster, by role. */
export interface ClusterPorts {
  temporal: number;
  ui: number;
  control: number;
  gateway: number;
  door: number;
  /**
   * the first of the sim nodes' node doors (`llmgw agent --door`), one per node: every replica is routed through its
   * node's door, and the engines listen on 127.0.0.1 behind it
   */
  nodeDoors: number;
  /** the first engine port (a range: leased per replica, not checked here) */
  engines: number;
  /** the first of five metrics ports: gateway, control plane and its Temporal SDK, ca-worker and its SDK */
  metrics: number;
  /**
   * the first of the sim nodes' metrics ports, two per node (agent, Temporal SDK); not checked here. null with
   * --base-port: each agent binds any free port (its log says which) and exports no SDK series, so clusters side by
   * side (the tests') never meet on a port nobody checked
   */
  agentMetrics: number | null;
}

/** The ports for `--base-port` (null: the standard ones). */
export function clusterPorts(base: number | null): ClusterPorts {
  return base === null
    ? {
        temporal: 7233,
        ui: 8233,
        control: 7443,
        gateway: 8080,
        door: 7444,
        nodeDoors: 7460,
        engines: 20000,
        metrics: 9464,
        agentMetrics: 9470,
      }
    : {
        temporal: base,
        ui: base + 1,
        control: base + 2,
        gateway: base + 3,
        door: base + 4,
        metrics: base + 5,
        nodeDoors: base + 10,
        engines: base + 13,
        agentMetrics: null,
      };
}

/**
 * Refuses (LLMGW_PORT_TAKEN) when a port of the cluster is held, naming each one, its role and the process holding
 * it. `doors` are the nodes that get a node door (`ports.nodeDoors` on), in order; `ours` are pids that may hold
 * ports: this state dir's Temporal left by a killed run (stopped next), and the node doors its agents left (the
 * next agent adopts each).
 */
export async function checkClusterPorts(
  ports: ClusterPorts,
  basePortGiven: boolean,
  doors: readonly string[],
  ours: readonly number[],
): Promise<void> {
  const roles: [string, number][] = [
    ['Temporal', ports.temporal],
    ['Temporal UI', ports.ui],
    ['control plane', ports.control],
    ['gateway', ports.gateway],
    ['Temporal door', ports.door],
    ['gateway metrics', ports.metrics],
    ['control plane metrics', ports.metrics + 1],
    ['control plane Temporal SDK metrics', ports.metrics + 2],
    ['ca-worker metrics', ports.metrics + 3],
    ['ca-worker Temporal SDK metrics', ports.metrics + 4],
    ...doors.map((node, i): [string, number] => [`${node}'s node door`, ports.nodeDoors + i]),
  ];
  const taken: string[] = [];
  for (const [role, port] of roles) {
    if (await portFree(port)) continue;
    const holder = portHolder(port);
    if (holder && ours.includes(holder.pid)) continue;
    taken.push(
      `port ${port} (${role}) is held by ${describePortHolder(port, 'a process this user cannot see (ss -ltnp shows it as root)', holder)}`,
    );
  }
  if (taken.length === 0) return;
  const fix = basePortGiven
    ? 'stop it, or choose another --base-port'
    : 'stop it (another llmgw cluster?), or move this one with --base-port N';
  throw new LlmgwError('LLMGW_PORT_TAKEN', `nothing started: ${taken.join('; ')}. ${fix}`, { taken });
}
