/** What every engine's launch builder takes and gives: a shard's place in its replica, and the command for it. */
import { rankFabricEnv } from '../hardware/nccl';
import type { EngineName, NodeInventory, Profile } from '../types';

/** One rank's address: where its engine (rank 0's HTTP API, or a worker's listener) binds. */
export interface RankAddress {
  host: string;
  port: number;
}

export interface ShardLaunch {
  model: string;
  source: string;
  profile: Profile;
  rank: number;
  world: number;
  host: string;
  port: number;
  distHost: string;
  distPort: number;
  /** The fabric a multi-node replica was placed on (placement's `fabric`); null or absent for a single-node one */
  fabric?: string | null;
  /** GPU indices on the node given to this shard; absent: the engine sees every GPU of the node (no CUDA_VISIBLE_DEVICES) */
  gpus?: number[];
  /** Every rank's address in rank order (multi-node): llama.cpp's rank 0 connects to its workers' rpc-servers by them */
  peers?: RankAddress[];
  /** Where the weights are on the node; absent: `source` is taken as the path */
  modelPath?: string;
}

/** The node that runs the shard, as far as its launch needs: its declared fabrics and their adapters. */
export interface LaunchNode {
  nodeId: string;
  inventory: Pick<NodeInventory, 'fabrics' | 'adapters'>;
}

/** The program of an engine a command runs; the node resolves it to a path in that engine's install. */
export const ENGINE_PROGRAMS = ['sim', 'llama-server', 'ggml-rpc-server', 'vllm', 'python'] as const;
export type EngineProgram = (typeof ENGINE_PROGRAMS)[number];

export interface EngineCommand {
  /** argv[0] is resolved by the node: `sim` runs llmgw's own sim engine entrypoint */
  engine: EngineName;
  /** Which of the engine's programs runs (llama.cpp has two: llama-server, and ggml-rpc-server on worker ranks) */
  program: EngineProgram;
  args: string[];
  /** Added to the engine's environment: a multi-node rank's NCCL_IB_HCA (exactly its fabric's adapters), CUDA_VISIBLE_DEVICES */
  env: Record<string, string>;
}

/** An engine's builder: the program and arguments for one shard (the environment is added by buildEngineCommand). */
export type EngineBuilder = (l: ShardLaunch) => { program: EngineProgram; args: string[] };

/**
 * The environment a shard's engine gets from its place: for a rank of a multi-node replica on `node`, NCCL_IB_HCA
 * naming exactly the placed fabric's adapters on that node in NCCL's exact-match form (`=mlx5_0:1,mlx5_1:1`, so
 * mlx5_1 never matches mlx5_10), never one of another fabric. Throws LLMGW_BAD_REQUEST when the node declares no
 * adapters on that fabric. Single-node shards, and launches without a node (tests), get nothing.
 */
export function shardEnv(l: ShardLaunch, node?: LaunchNode): Record<string, string> {
  if (l.world <= 1 || !l.fabric || !node) return {};
  return rankFabricEnv(node.nodeId, node.inventory, l.fabric);
}

/** CUDA_VISIBLE_DEVICES from the shard's GPUs, when the launch names them. */
export function gpuEnv(l: ShardLaunch): Record<string, string> {
  return l.gpus?.length ? { CUDA_VISIBLE_DEVICES: l.gpus.join(',') } : {};
}

/** The weights' path on the node. */
export function modelPath(l: ShardLaunch): string {
  return l.modelPath ?? l.source;
}
