/**
 * SGLang's launch (pinned in config/defaults.ts `engines.sglang`; flags read from that release's
 * sglang/srt/arg_groups/fields/{parallel,serving,model}.py, which server_args.py turns into flags). Multi-node
 * is SGLang's own: every node runs the same launch_server with `--nnodes --node-rank --dist-init-addr` (rank 0's
 * address), and `--tp-size` counts the GPUs of all nodes. `--tp` is not a flag of its own: argparse only
 * accepts it as an abbreviation while it stays unambiguous, so llmgw writes the full name.
 */
import { engineApiHost } from '../node-door';
import { modelPath, type ShardLaunch } from './launch';
import { defineEngine, parseDottedVersion, releaseVersion, type ProgramArgs } from './spec';

/** The command for one SGLang shard (`python -m sglang.launch_server …`); the node runs it with its SGLang python. */
export function sglangCommand(l: ShardLaunch): ProgramArgs<'python'> {
  return {
    program: 'python',
    args: [
      '-m',
      'sglang.launch_server',
      '--model-path',
      modelPath(l),
      // The HTTP API on loopback: only the node's door reaches it (lib/node-door.ts).
      '--host',
      engineApiHost(l),
      '--port',
      String(l.port),
      '--served-model-name',
      l.model,
      // GET /metrics: the agent reads the queue (num_queue_reqs) from it every second (lib/engines/signals.ts).
      ...(l.profile.args.includes('--enable-metrics') ? [] : ['--enable-metrics']),
      '--tp-size',
      String(l.profile.gpusPerNode * l.world),
      ...(l.world > 1
        ? [
            '--nnodes',
            String(l.world),
            '--node-rank',
            String(l.rank),
            '--dist-init-addr',
            `${l.distHost}:${l.distPort}`,
          ]
        : []),
      ...l.profile.args,
    ],
  };
}

/** SGLang's spec: the PyPI package sglang, run by its python (`python -m sglang.launch_server`). */
export const sglang = defineEngine({
  name: 'sglang',
  title: 'SGLang',
  programs: ['python'],
  // Its help comes through its launch module.
  helpArgs: { python: ['-m', 'sglang.launch_server', '--help'] },
  versionArgs: ['-c', 'import sglang; print(sglang.__version__)'],
  parseVersion: parseDottedVersion,
  install: {
    kind: 'installed',
    pip: { package: 'sglang', version: releaseVersion('sglang') },
    operator: { flag: '--sglang-python', binary: 'the python with SGLang', help: 'a python with SGLang installed' },
  },
  binPrograms: (bin) => ({ python: [bin] }),
  venvPrograms: (venv) => ({ python: [venv.bin('python')] }),
  needsNvidiaGpu: false,
  // SGLang's quickstart: NVIDIA GPUs of sm75 and above (T4, A10, A100, L4, L40S, H100).
  minComputeCapability: '7.5',
  needsLibgomp: false,
  // Every rank loads its own part of the weights.
  rankNeedsWeights: () => true,
  // Node rank 0 hosts --dist-init-addr (torch.distributed's store); the other ranks wait for it to come up.
  rankStart: 'head-first',
  // Rank 0's --dist-init-addr port (torch.distributed's TCPStore), which the other ranks join.
  rankPorts: (l) => (l.world > 1 && l.rank === 0 ? [l.distPort] : []),
  // Without --is-embedding SGLang still embeds with a model whose architecture is an embedding one.
  embeds: (args) => (args.includes('--is-embedding') ? true : null),
  embedsWith: 'an SGLang profile embeds with --is-embedding in its args',
  command: sglangCommand,
});
