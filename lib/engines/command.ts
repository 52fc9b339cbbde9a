/** Pure launch-command builders, one per engine, from a replica's profile and a shard's place in it. */
import type { EngineName, Profile } from '../types';

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
}

export interface EngineCommand {
  /** argv[0] is resolved by the node: `sim` runs llmgw's own sim engine entrypoint */
  engine: EngineName;
  args: string[];
}

/** Builds the command a node runs for one shard. */
export function buildEngineCommand(l: ShardLaunch): EngineCommand {
  switch (l.profile.engine) {
    case 'sim':
      return {
        engine: 'sim',
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
