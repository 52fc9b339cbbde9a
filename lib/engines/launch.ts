/** What every engine's launch builder takes: a shard's place in its replica. Pure, like the builders. */
import type { NodeInventory, Profile } from '../types';

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
  /**
   * The node runs a door (llmgw agent --door): the engine's HTTP API listens on the node's loopback, reached only
   * through the door. Absent: on `host`, where the gateways reach it directly (lib/node-door.ts).
   */
  behindDoor?: boolean;
  distHost: string;
  distPort: number;
  /** The fabric a multi-node replica was placed on (placement's `fabric`); null or absent for a single-node one */
  fabric?: string | null;
  /**
   * GPU indices on the node placement gave this shard: its CUDA_VISIBLE_DEVICES (empty: it sees none). Absent only
   * in placements recorded before GPU pinning: the engine then sees every GPU of the node.
   */
  gpus?: number[];
  /** Where the node keeps one lock file per GPU index (the agent's state dir): the sim engine refuses a held GPU */
  gpuLockDir?: string;
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

/**
 * CUDA_VISIBLE_DEVICES from the shard's GPUs whenever the launch names them, also none: a shard given no GPU must
 * not start on GPU 0, which another shard holds. Every engine renumbers what it sees from 0, so none needs a
 * device flag of its own (docs/engines.md, "GPU pinning").
 */
export function gpuEnv(l: ShardLaunch): Record<string, string> {
  return l.gpus ? { CUDA_VISIBLE_DEVICES: l.gpus.join(',') } : {};
}

/** The weights' path on the node. */
export function modelPath(l: ShardLaunch): string {
  return l.modelPath ?? l.source;
}
