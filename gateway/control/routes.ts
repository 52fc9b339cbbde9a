/** The control plane's HTTP API: the agent routes and the operator routes, with the options they share. */
import type { FastifyInstance } from 'fastify';
import type { Store } from '../../lib/store/store';
import type { ModelSpec, NodeId } from '../../lib/types';
import { agentRoutes, type AgentRoutesOptions } from './agent-routes';
import { catalogRoutes } from './catalog-routes';
import { keyRoutes } from './key-routes';
import type { CatalogApplyAnswer, EndedDrain, RenewedCertificate } from './contract';
import type { ControlLog } from './identity';
import { NodeBeats } from './node-beats';
import { operatorRoutes } from './operator-routes';

export interface ControlAppOptions {
  store: Store;
  /**
   * What the agent gets back: where its worker connects — a fixed address, or one made from the host the agent
   * reached the control plane at (the door's, on the control plane's host) — and whether with its node
   * certificate (`mtls`, the door) or in plain gRPC (a Temporal the node may reach directly: tests).
   */
  temporal: { address: string | ((requestHost: string) => string); namespace: string; mtls?: boolean };
  heartbeatMs: number;
  /**
   * The agents' heartbeats in this process's memory (node-beats.ts): the heartbeat route records them and writes
   * MySQL only as its policy says; node liveness and the node list read them. Default: the routes' own.
   */
  beats?: NodeBeats;
  /** Where a refused identity claim is logged (one line: the CN, the claimed id and the reason). */
  log?: ControlLog;
  /** Revokes every certificate of a node, and cuts its open connections (`POST /v1/nodes/:id/revoke`). */
  revoke?: (nodeId: string, reason: string) => Promise<number>;
  /**
   * Signs a renewing node's CSR for `identity` (its connection's CN), checking that `presentedSerial` is an
   * unrevoked certificate of that CN (`POST /v1/agent/renew`).
   */
  renew?: (input: { csrPem: string; identity: NodeId; presentedSerial: string }) => Promise<RenewedCertificate>;
  /** Ends a running drain of the node (`POST /v1/nodes/:id/drain/cancel`, and before an uncordon); null: none ran. */
  endDrain?: (nodeId: NodeId) => Promise<EndedDrain | null>;
  /** Called after a node registers or returns from down, so waiting replicas try placement again. */
  onNodesChanged?: (nodeId: string) => void;
  /** Called after a node (an agent starting) registers: the control plane has it install and probe its engines. */
  onRegistered?: (nodeId: NodeId) => void;
  /** Called when a known node's agent registers after its previous agent crashed: its replicas run their shards again. */
  onAgentCrashed?: (nodeId: NodeId) => void;
  /** Plans a checked catalog against the cluster and (unless a dry run) applies it (`POST /v1/catalog/apply`). */
  applyCatalog?: (req: {
    catalog: readonly ModelSpec[];
    prune: boolean;
    dryRun: boolean;
  }) => Promise<CatalogApplyAnswer>;
}

/** A node's newest unrevoked certificate as the node list shows it (null: none recorded, or all revoked). */

/** Registers the agent and the operator routes on `app` (each plugin answers refusals in one error shape). */
export async function controlRoutes(app: FastifyInstance, opts: ControlAppOptions): Promise<void> {
  const withBeats: AgentRoutesOptions = { ...opts, beats: opts.beats ?? new NodeBeats() };
  opts = withBeats;
  await app.register(agentRoutes, withBeats);
  await app.register(operatorRoutes, opts);
  await app.register(catalogRoutes, opts);
  await app.register(keyRoutes, opts);
}
