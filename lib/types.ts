/** Domain types shared by every process. Ids are branded and made only by the parse functions. */
import { quoteInput } from './errors';

export type NodeId = string & { readonly __brand: 'NodeId' };
export type ReplicaId = string & { readonly __brand: 'ReplicaId' };

/** One alphabet for node ids: it is also the VM name, hostname and certificate CN. */
const NODE_ID_RE = /^[a-z][a-z0-9-]{0,30}[a-z0-9]$/;

/** Parses a node id, or throws an error that names the rule. */
export function parseNodeId(raw: string): NodeId {
  if (!NODE_ID_RE.test(raw)) {
    throw new Error(
      `invalid node id ${quoteInput(raw)}: use 2-32 characters of a-z, 0-9 and '-', starting with a letter and not ending in '-' (it is also the hostname and certificate CN)`,
    );
  }
  return raw as NodeId;
}

/** Parses a replica id (`<model>-<n>`). */
export function parseReplicaId(raw: string): ReplicaId {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,120}$/.test(raw)) throw new Error(`invalid replica id "${raw}"`);
  return raw as ReplicaId;
}

export const ENGINES = ['sim', 'llamacpp', 'vllm', 'sglang'] as const;
export type EngineName = (typeof ENGINES)[number];

export interface Gpu {
  index: number;
  name: string;
  memoryMiB: number;
  uuid: string;
  /** CUDA compute capability, e.g. "8.0" (nvidia-smi's compute_cap; absent from older drivers and agents) */
  computeCap?: string;
}

/** How a node's GPUs are linked (`nvidia-smi topo -m`): `links[i][j]` is GPU i to GPU j (NV12, PIX, PXB, PHB, NODE, SYS; X itself). */
export interface GpuTopology {
  links: string[][];
}

export interface IbAdapter {
  device: string; // e.g. mlx5_0
  port: number;
  state: string; // e.g. "4: ACTIVE"
  rate: string; // e.g. "200 Gb/sec (4X HDR)"
  linkLayer: string; // InfiniBand | Ethernet
  /** e.g. "5: LinkUp", "2: Polling"; absent when sysfs has no phys_state */
  physState?: string;
}

/** What a node could learn about the subnet manager behind one declared fabric's ports. */
export interface FabricIdentity {
  /** The master SM's port GUID (`0x` + 16 hex digits) as sminfo reported it; null when it could not be read */
  smGuid: string | null;
  /** 'sm-guid': every declared port's SM was read and they agree; 'declared-only': the name is trusted as declared (weaker) */
  strength: 'sm-guid' | 'declared-only';
  /** sysfs sm_lid shared by the ports (necessary, not sufficient: LID 1 is common to many fabrics) */
  smLid?: string | null;
  /** Why the identity is weaker, or what else was seen */
  note?: string;
}

export const DOCTOR_STATUSES = ['pass', 'warn', 'fail'] as const;
export type DoctorStatus = (typeof DOCTOR_STATUSES)[number];

/** One `llmgw doctor` check: what it found and the one-line fix. */
export interface DoctorResult {
  /** e.g. `cpu-flags`, `subnet-manager/ib-a` */
  id: string;
  status: DoctorStatus;
  summary: string;
  /** What to do; empty when the check passed */
  fix: string;
}

/** One engine on one node after its install and probe (`llmgw ctl nodes` shows it; placement uses only `offered`). */
export interface EngineStatus {
  engine: EngineName;
  /** the version named in server.yaml, or the one an operator's binary reports ("" when it reports none) */
  version: string;
  /** offered: installed, ran and passed engine-check; skipped: not for this node; failed: see reason */
  state: 'offered' | 'failed' | 'skipped';
  /** why it failed or was skipped, with the engine's own error output and the fix; null when offered */
  reason: string | null;
  /** where it came from: llmgw's own (sim), the operator's binary, or installed from PyPI */
  from: 'builtin' | 'operator' | 'pip';
}

/** What a node reports when it registers. */
export interface NodeInventory {
  gpus: Gpu[];
  adapters: IbAdapter[];
  /** fabric name -> adapter devices on it */
  fabrics: Record<string, string[]>;
  cpuFlags: string[];
  engines: EngineName[];
  /** The node's address, as seen by the gateway and by other nodes (its door, multi-node ranks' rendezvous). */
  host: string;
  /**
   * The node's door (the agent's one inference listener, gateway/node-door): its port on `host`. Absent from agents
   * older than the door: their replicas are routed to the engine's own port, as before.
   */
  door?: { port: number };
  /** fabric name -> the subnet manager its ports see (absent from agents older than fabric identity) */
  fabricIdentity?: Record<string, FabricIdentity>;
  /** The agent's `llmgw doctor` results at start */
  doctor?: DoctorResult[];
  /** `nvidia-smi topo -m` (absent: not reported, or a node with fewer than two GPUs) */
  gpuTopology?: GpuTopology;
}

export const NODE_STATES = ['ready', 'cordoned', 'down'] as const;
export type NodeState = (typeof NODE_STATES)[number];

export interface NodeRecord {
  id: NodeId;
  state: NodeState;
  inventory: NodeInventory;
  lastSeen: Date | null;
  registeredAt: Date;
  /** each engine's install and probe result (null: not probed yet) */
  engineStatus?: EngineStatus[] | null;
  /** the hash of server.yaml's engines and catalog the probe checked against */
  enginesConfig?: string | null;
}

/** A model profile: how to run one model with one engine. */
export interface Profile {
  name: string;
  engine: EngineName;
  nodes: number;
  gpusPerNode: number;
  args: string[];
}

export interface ModelSpec {
  name: string;
  source: string;
  /** sha256 (hex) of the file a URL source names: each node verifies its download against it */
  sha256?: string;
  replicas: number;
  /** how long a stopping replica of this model waits for its requests in flight, s (server.yaml drain.graceS when unset) */
  drainGraceS?: number;
  profiles: Profile[];
  /** How long the gateway waits for a replica's first byte of an answer, ms; overrides gateway.timeouts.firstByteMs */
  firstByteMs?: number;
  /** How many requests the gateway sends one replica at once, then queues (default: the engine's slots, else gateway.admission.defaultMaxConcurrent) */
  maxConcurrent?: number;
  /** how long an engine may take to serve once its weights are in place, s (default DEFAULT_START_TIMEOUT_S) */
  startTimeoutS?: number;
  /** How the gateway chooses among the model's replicas (default: least outstanding) */
  routing?: ModelRouting;
}

/**
 * The gateway's ways of choosing a replica, one per model (catalog `routing.policy`): `least` (fewest requests in
 * flight, the base every other falls back to), `round-robin` (for comparison), `session` (the same replica for one
 * session header or `user`) and `prefix` (the same replica for one prompt prefix), both by bounded-load consistent
 * hashing.
 */
export const ROUTING_POLICIES = ['least', 'round-robin', 'session', 'prefix'] as const;
export type RoutingPolicy = (typeof ROUTING_POLICIES)[number];

/** A model's routing as the catalog sets it; unset fields take ROUTING_DEFAULTS. */
export interface ModelRouting {
  policy: RoutingPolicy;
  /** session: the request header naming a session (else the body's `user`) */
  sessionHeader?: string;
  /** prefix: the most bytes of the prompt hashed (of a chat: no further than the end of its first message) */
  prefixBytes?: number;
  /** session and prefix: a replica is passed over once its requests in flight reach its share × this */
  loadFactor?: number;
}

/** The defaults of a model's routing fields. */
export const ROUTING_DEFAULTS = Object.freeze({
  policy: 'least' as RoutingPolicy,
  sessionHeader: 'x-session-id',
  prefixBytes: 8192,
  loadFactor: 1.25,
});

export interface ShardAssignment {
  rank: number;
  nodeId: NodeId;
  /** Port the shard's HTTP API (rank 0) or its worker side listens on. */
  port: number;
  /** The GPU indices on its node it holds (its CUDA_VISIBLE_DEVICES); absent in placements older than migration 10 */
  gpus?: number[];
}

export interface Assignment {
  fabric: string | null;
  shards: ShardAssignment[];
  /** Port rank 0 binds for the other ranks to join (multi-node only). */
  distPort: number | null;
}

export const REPLICA_STATES = [
  'pending',
  'placing',
  'waiting',
  'starting',
  'ready',
  'rebuilding',
  'stopping',
  'stopped',
  'failed',
] as const;
export type ReplicaState = (typeof REPLICA_STATES)[number];

export interface ReplicaRecord {
  id: ReplicaId;
  model: string;
  profile: string;
  state: ReplicaState;
  reason: string | null;
  /** Base URL of rank 0's HTTP API once it serves. */
  endpoint: string | null;
  shards: ShardAssignment[];
  updatedAt: Date;
}
