/**
 * llama.cpp's launch (pinned in config/defaults.ts `engines.llamacpp`; flags read from that build's
 * common/arg.cpp and tools/rpc/rpc-server.cpp, and checked against its captured help in
 * test/fixtures/engine-help/). A model spread over nodes runs as llama.cpp's RPC split: every worker rank
 * runs `ggml-rpc-server` offering its GPUs (the program older builds called rpc-server), and rank 0 runs
 * `llama-server --rpc host:port,…` over them.
 */
import { LlmgwError } from '../errors';
import { modelPath, type EngineProgram, type ShardLaunch } from './launch';

/** ggml-rpc-server on a worker rank: binds the node's address (rank 0 connects in), never a public one by default. */
function rpcServer(l: ShardLaunch): { program: EngineProgram; args: string[] } {
  // The profile's args are llama-server's: ggml-rpc-server takes few flags and refuses the rest.
  return { program: 'ggml-rpc-server', args: ['--host', l.host, '--port', String(l.port)] };
}

/** The `--rpc` list for rank 0: every worker rank's ggml-rpc-server, in rank order. */
function rpcList(l: ShardLaunch): string {
  const workers = (l.peers ?? []).slice(1);
  if (workers.length !== l.world - 1) {
    throw new LlmgwError('LLMGW_BAD_REQUEST', `llama.cpp rank 0 of a ${l.world}-node replica needs every worker rank's address (peers), got ${workers.length}`, { model: l.model, world: l.world });
  }
  return workers.map((p) => `${p.host}:${p.port}`).join(',');
}

/** The command for one llama.cpp shard: llama-server on rank 0 (with --rpc when multi-node), ggml-rpc-server on the others. */
export function llamacppCommand(l: ShardLaunch): { program: EngineProgram; args: string[] } {
  if (l.rank > 0) return rpcServer(l);
  return {
    program: 'llama-server',
    args: [
      '--model', modelPath(l), '--host', l.host, '--port', String(l.port),
      // The name the gateway routes by is the one /v1/models answers with.
      '--alias', l.model,
      ...(l.world > 1 ? ['--rpc', rpcList(l)] : []),
      ...l.profile.args,
    ],
  };
}
