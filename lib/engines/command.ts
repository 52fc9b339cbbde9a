/** Launch commands: buildEngineCommand dispatches a shard to its engine's pure builder and adds its environment. */
import { rankFabricEnv } from '../hardware/nccl';
import type { EngineName } from '../types';
import { gpuEnv, type LaunchNode, type ShardLaunch } from './launch';
import { ENGINE_SPECS, type EngineProgram } from './registry';

export { type LaunchNode, type ShardLaunch } from './launch';

/** The command a node runs for one shard: the engine's program, its arguments and its environment. */
export interface EngineCommand {
  /** argv[0] is resolved by the node: `sim` runs llmgw's own sim engine entrypoint */
  engine: EngineName;
  /** Which of the engine's programs runs (llama.cpp has two: llama-server, and ggml-rpc-server on worker ranks) */
  program: EngineProgram;
  args: string[];
  /** Added to the engine's environment: a multi-node rank's NCCL_IB_HCA (exactly its fabric's adapters), CUDA_VISIBLE_DEVICES */
  env: Record<string, string>;
}

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

/** Builds the command a node runs for one shard (`node`: the node running it, for a multi-node rank's fabric). */
export function buildEngineCommand(l: ShardLaunch, node?: LaunchNode): EngineCommand {
  const spec = ENGINE_SPECS[l.profile.engine];
  if (!spec) throw new Error(`unknown engine ${String(l.profile.engine)}`);
  const { program, args } = spec.command(l);
  return { engine: l.profile.engine, program, args, env: { ...shardEnv(l, node), ...gpuEnv(l) } };
}
