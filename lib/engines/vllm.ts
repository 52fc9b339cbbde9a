/**
 * vLLM's launch (pinned in config/defaults.ts `engines.vllm`; flags read from that release's
 * vllm/engine/arg_utils.py and vllm/entrypoints/cli/serve.py). Multi-node follows vLLM's "Running vLLM with
 * MultiProcessing" (docs/serving/parallelism_scaling.md): no Ray; every node runs `vllm serve` with
 * `--nnodes N --node-rank R --master-addr HEAD`, the workers with `--headless` (no API server), tensor
 * parallel within a node and pipeline parallel across nodes (tp = GPUs per node, pp = nodes, as that page advises).
 */
import { modelPath, type EngineProgram, type ShardLaunch } from './launch';

/** The command for one vLLM shard: `vllm serve MODEL` on rank 0, `vllm serve MODEL --headless` on the others. */
export function vllmCommand(l: ShardLaunch): { program: EngineProgram; args: string[] } {
  const multi = l.world > 1;
  return {
    program: 'vllm',
    args: [
      'serve', modelPath(l),
      // Headless ranks start no API server: host, port and the served name are rank 0's alone.
      ...(l.rank === 0 ? ['--host', l.host, '--port', String(l.port), '--served-model-name', l.model] : []),
      '--tensor-parallel-size', String(l.profile.gpusPerNode),
      ...(multi ? [
        '--pipeline-parallel-size', String(l.world),
        '--nnodes', String(l.world), '--node-rank', String(l.rank),
        '--master-addr', l.distHost, '--master-port', String(l.distPort),
        ...(l.rank > 0 ? ['--headless'] : []),
      ] : []),
      // Last, so a profile's own --tensor-parallel-size (argparse: the last one wins) overrides llmgw's.
      ...l.profile.args,
    ],
  };
}
