/**
 * vLLM's launch (pinned in config/defaults.ts `engines.vllm`; flags read from that release's
 * vllm/engine/arg_utils.py and vllm/entrypoints/cli/serve.py). Multi-node follows vLLM's "Running vLLM with
 * MultiProcessing" (docs/serving/parallelism_scaling.md): no Ray; every node runs `vllm serve` with
 * `--nnodes N --node-rank R --master-addr HEAD`, the workers with `--headless` (no API server), tensor
 * parallel within a node and pipeline parallel across nodes (tp = GPUs per node, pp = nodes, as that page advises).
 */
import { engineApiHost } from '../node-door';
import { modelPath, type ShardLaunch } from './launch';
import { defineEngine, flagValue, parseDottedVersion, releaseVersion, type ProgramArgs } from './spec';

/** The command for one vLLM shard: `vllm serve MODEL` on rank 0, `vllm serve MODEL --headless` on the others. */
export function vllmCommand(l: ShardLaunch): ProgramArgs<'vllm'> {
  const multi = l.world > 1;
  return {
    program: 'vllm',
    args: [
      'serve',
      modelPath(l),
      // Headless ranks start no API server: host, port and the served name are rank 0's alone. The API on
      // loopback: only the node's door reaches it (lib/node-door.ts).
      ...(l.rank === 0 ? ['--host', engineApiHost(l), '--port', String(l.port), '--served-model-name', l.model] : []),
      '--tensor-parallel-size',
      String(l.profile.gpusPerNode),
      ...(multi
        ? [
            '--pipeline-parallel-size',
            String(l.world),
            '--nnodes',
            String(l.world),
            '--node-rank',
            String(l.rank),
            '--master-addr',
            l.distHost,
            '--master-port',
            String(l.distPort),
            ...(l.rank > 0 ? ['--headless'] : []),
          ]
        : []),
      // Last, so a profile's own --tensor-parallel-size (argparse: the last one wins) overrides llmgw's.
      ...l.profile.args,
    ],
  };
}

/**
 * True for the summary `vllm serve --help` prints (section names and a pointer to `--help=all`) instead of its
 * flags: checked against it, every flag is reported missing, confidently and wrongly.
 */
export function isVllmSummary(help: string): boolean {
  return /^Config Groups:/m.test(help) && /--help=all/.test(help);
}

/** vLLM's spec: the PyPI package vllm, run only where there is an NVIDIA GPU. */
export const vllm = defineEngine({
  name: 'vllm',
  title: 'vLLM',
  programs: ['vllm'],
  // Only --help=all prints every flag.
  helpArgs: { vllm: ['serve', '--help=all'] },
  // vLLM infers its device at import and exits 1 on a machine with no accelerator.
  helpEnv: { VLLM_TARGET_DEVICE: 'cpu' },
  helpCaveat: {
    program: 'vllm',
    applies: isVllmSummary,
    warning:
      'this is the summary vllm serve --help prints, not its flags: give the output of VLLM_TARGET_DEVICE=cpu vllm serve --help=all',
  },
  versionArgs: ['--version'],
  parseVersion: parseDottedVersion,
  install: {
    kind: 'installed',
    pip: { package: 'vllm', version: releaseVersion('vllm') },
    operator: { flag: '--vllm-bin', binary: 'vllm', help: 'the vllm entrypoint' },
  },
  binPrograms: (bin) => ({ vllm: [bin] }),
  venvPrograms: (venv) => ({ vllm: [venv.bin('vllm')] }),
  needsNvidiaGpu: true,
  // vLLM's GPU installation page: compute capability 7.5 or higher (T4, RTX 20xx, A100, L4, H100, B200); Volta went with v0.21.
  minComputeCapability: '7.5',
  needsLibgomp: false,
  // Every rank loads its own part of the weights.
  rankNeedsWeights: () => true,
  // Node rank 0 hosts the master port (torch.distributed's store); the headless ranks wait for it to come up.
  rankStart: 'head-first',
  // Rank 0's master port (torch.distributed's TCPStore), which the headless ranks join.
  rankPorts: (l) => (l.world > 1 && l.rank === 0 ? [l.distPort] : []),
  // --runner auto (the default) embeds when the model is an embedding model: only vLLM knows.
  embeds: (args) => {
    const runner = flagValue(args, '--runner');
    if (runner === 'pooling' || flagValue(args, '--convert') === 'embed' || flagValue(args, '--task') === 'embed')
      return true;
    return runner === 'generate' || runner === 'draft' ? false : null;
  },
  embedsWith: 'a vLLM profile embeds with --runner pooling (or --convert embed) in its args',
  command: vllmCommand,
});
