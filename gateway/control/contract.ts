/**
 * The control API's wire types: what agents, the CLI and the CA client send and get back. They import this file,
 * never a route file, so a route can change its code without its callers following it.
 */
import type { AssignedShard } from '../../activities/node/gc';
import type { CatalogAction } from '../../lib/catalog';
import type { GatewayLag } from '../../lib/store/drain';
import type { RouteChange } from '../../lib/store/route-changes';
import type { EngineName, ModelSpec, NodeId, NodeInventory, NodeRecord } from '../../lib/types';

/** POST /v1/agent/register: the node (its certificate's CN) and what it found on itself. */
export interface RegisterRequest {
  nodeId: string;
  inventory: NodeInventory;
  /** The agent's first registration after the previous agent on the node crashed: its shards' activities are orphaned. */
  afterCrash?: boolean;
}

/** Where a node's worker reaches Temporal (the registration's answer); `mtls`: with its node certificate, the door. */
export interface NodeTemporal {
  address: string;
  namespace: string;
  mtls: boolean;
}

/** POST /v1/agent/register's answer. */
export interface Registration {
  nodeId: NodeId;
  temporal: NodeTemporal;
  /** how often the agent heartbeats, ms */
  heartbeatMs: number;
}

/**
 * POST /v1/agent/heartbeat's answer. `temporal` names the door of the control plane that answered, as a
 * registration there would: an agent that failed over to another control plane moves its node worker there.
 */
export interface HeartbeatAnswer {
  ok: true;
  temporal: NodeTemporal;
}

/** GET /v1/agent/shards's answer: the shards placed on the asking node. */
export interface AgentShards {
  shards: AssignedShard[];
}

/** POST /v1/agent/renew: a CSR for the connection's own CN. */
export interface RenewRequest {
  nodeId: string;
  csr: string;
}

/** What a renewal returns to the agent. */
export interface RenewedCertificate {
  serial: string;
  certPem: string;
  caPem: string;
  notAfter: string;
  renewAt: string;
}

/** A node's newest unrevoked certificate as the node list shows it (null: none recorded, or all revoked). */
export interface NodeCertificate {
  serial: string;
  notAfter: string;
  /** two thirds of its lifetime: an agent still on it after this missed its renewal */
  renewAt: string;
  /** true when every certificate of the node is revoked */
  revoked: boolean;
}

/** A shard's hold on a node's GPUs, as GET /v1/nodes lists it. */
export interface GpuShard {
  replicaId: string;
  rank: number;
  gpus: number[];
}

/** One node of GET /v1/nodes; `gpuShards`: which GPU indices each shard placed there holds. */
export type NodeListEntry = NodeRecord & {
  cert: NodeCertificate | null;
  replicas: string[];
  gpusUsed: number;
  gpuShards?: GpuShard[];
};

/** A peer for GET /v1/agent/weights/peers. */
export interface WeightsPeer {
  nodeId: string;
  endpoint: string;
  sha256: string;
  size: number;
}

/** GET /v1/agent/certificate-status's answer: whether a client certificate is recorded, unrevoked and valid. */
export interface CertificateStatus {
  honoured: boolean;
  cn: string | null;
}

/** A refusal, from every route: OpenAI's error shape with llmgw's code. */
export interface ErrorBody {
  error?: { message: string; type?: string; code?: string };
}

/** A running drain the control plane ended (`ctl drain NODE --cancel`, `ctl uncordon NODE`). */
export interface EndedDrain {
  workflowId: string;
  /** how its workflow closed (cancelled, completed, failed, …); running: it did not end within the wait */
  status: string;
  /** what became of the move it was making (the drain's progress note), when it says */
  note: string | null;
}

/** POST /v1/nodes/:id/drain/cancel's answer; drain null: none was running. */
export interface DrainCancelAnswer {
  nodeId: string;
  drain: EndedDrain | null;
}

/** POST /v1/nodes/:id/revoke's answer: the reason as recorded, cut to what the store holds when it was longer. */
export interface RevokeAnswer {
  nodeId: string;
  revoked: number;
  reason: string;
  reasonCut: boolean;
}

/** POST /v1/nodes/:id/cordon and /uncordon's answer; an uncordon first ends a running drain of the node. */
export interface CordonAnswer {
  nodeId: string;
  state: string;
  changed: boolean;
  drainEnded?: EndedDrain | null;
}

/** One model of GET /v1/models: its recorded spec with the desired count as `replicas`, and what runs. */
export type ModelListEntry = ModelSpec & {
  actual: {
    /** replicas not stopped, by state */
    states: Record<string, number>;
    /** replicas not stopped, by the profile they were placed as */
    profiles: Record<string, number>;
  };
};

/**
 * GET /v1/models/:name/routing: the model's ready replicas and, for each live gateway (one that wrote its report
 * within GATEWAY_LIVE_MS), those it does not route yet. `ctl deploy` waits until no gateway misses one.
 */
export interface ModelRoutingAnswer {
  model: string;
  ready: string[];
  gateways: GatewayLag[];
}

/** POST /v1/catalog/apply: a server.yaml's catalog (and its engines, which its profiles are checked against). */
export interface CatalogApplyRequest {
  catalog: ModelSpec[];
  engines?: Partial<Record<EngineName, string>>;
  /** also drain, stop and forget models the catalog no longer has */
  prune?: boolean;
  /** say what would change, change nothing */
  dryRun?: boolean;
}

/** POST /v1/catalog/apply's answer: each model's action, and what failed to be carried out. */
export interface CatalogApplyAnswer {
  dryRun: boolean;
  actions: CatalogAction[];
  /** one per action that could not be carried out: `model: why` */
  errors: string[];
}

/** `POST /v1/page-keys`: the new cluster page key (shown this once; only its SHA-256 is stored). */
export interface PageKeyCreated {
  name: string;
  key: string;
}

/** `POST /v1/keys`: a new inference key, by its SHA-256 (the key itself stays with the operator). */
export interface KeyCreateRequest {
  name: string;
  /** SHA-256 of the key, hex */
  digest: string;
  /** the key's first characters, shown by ctl keys list */
  prefix: string;
  models?: string[] | null;
  rpm?: number | null;
  tpm?: number | null;
  /** ISO date-time */
  expiresAt?: string | null;
}

/**
 * One line of `GET /v1/gateway/routes?after=N` (gateway certificates; newline-delimited JSON): `hello` first, then
 * each route change after N (with its row as read now), `ping`s while nothing changes, and `resync` when the
 * gateway must read the routing table whole (its cursor is older than the changes kept, or a read failed).
 */
export type RouteStreamLine =
  | { kind: 'hello'; cursor: number; pingMs: number }
  | { kind: 'change'; change: RouteChange }
  | { kind: 'ping'; cursor: number }
  | { kind: 'resync'; reason: string };
