/** Pure launch-command builders, one per engine, from a replica's profile and a shard's place in it. */
import { rankFabricEnv } from '../hardware/nccl';
import type { EngineName, NodeInventory, Profile } from '../types';

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
}

/** The node that runs the shard, as far as its launch needs: its declared fabrics and their adapters. */
export interface LaunchNode {
  nodeId: string;
  inventory: Pick<NodeInventory, 'fabrics' | 'adapters'>;
}

export interface EngineCommand {
  /** argv[0] is resolved by the node: `sim` runs llmgw's own sim engine entrypoint */
  engine: EngineName;
  args: string[];
  /** Added to the engine's environment: a multi-node rank's NCCL_IB_HCA (exactly its fabric's adapters) */
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
  switch (l.profile.engine) {
    case 'sim':
      return {
        engine: 'sim',
        env: shardEnv(l, node),
        args: [
          '--model', l.model, '--host', l.host, '--port', String(l.port),
          '--rank', String(l.rank), '--world', String(l.world),
          '--dist-host', l.distHost, '--dist-port', String(l.distPort),
          ...l.profile.args,
        ],
      };
    case 'llamacpp':
    case 'vllm':
    case 'sglang':
      throw new Error(`engine "${l.profile.engine}" launch is not built yet; only the sim engine runs in this release`);
    default: {
      const never: never = l.profile.engine;
      throw new Error(`unknown engine ${String(never)}`);
    }
  }
}
