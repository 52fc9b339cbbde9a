/** Launch commands: buildEngineCommand dispatches a shard to its engine's pure builder and adds its environment. */
import type { EngineName } from '../types';
import { llamacppCommand } from './llamacpp';
import { gpuEnv, shardEnv, type EngineBuilder, type EngineCommand, type LaunchNode, type ShardLaunch } from './launch';
import { sglangCommand } from './sglang';
import { vllmCommand } from './vllm';

export { shardEnv, type EngineCommand, type LaunchNode, type ShardLaunch } from './launch';

/** llmgw's own sim engine: the same shape of flags as the real engines' multi-node ones. */
const simCommand: EngineBuilder = (l) => ({
  program: 'sim',
  args: [
    '--model', l.model, '--host', l.host, '--port', String(l.port),
    '--rank', String(l.rank), '--world', String(l.world),
    '--dist-host', l.distHost, '--dist-port', String(l.distPort),
    ...l.profile.args,
  ],
});

/** Each engine's builder (lib/engines/<engine>.ts). */
export const ENGINE_BUILDERS: Readonly<Record<EngineName, EngineBuilder>> = {
  sim: simCommand,
  llamacpp: llamacppCommand,
  vllm: vllmCommand,
  sglang: sglangCommand,
};

/** Builds the command a node runs for one shard (`node`: the node running it, for a multi-node rank's fabric). */
export function buildEngineCommand(l: ShardLaunch, node?: LaunchNode): EngineCommand {
  const build = ENGINE_BUILDERS[l.profile.engine];
  if (!build) throw new Error(`unknown engine ${String(l.profile.engine)}`);
  const { program, args } = build(l);
  return { engine: l.profile.engine, program, args, env: { ...shardEnv(l, node), ...gpuEnv(l) } };
}
