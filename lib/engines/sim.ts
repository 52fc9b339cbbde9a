/**
 * llmgw's own sim engine (lib/sim/server.ts, run as `sim-engine`): a real process with the same HTTP API and
 * the same shape of multi-node flags as the real engines, carried by every agent. It needs no GPU.
 */
import { engineApiHost } from '../node-door';
import { defineEngine, parseDottedVersion, type EngineBuilder } from './spec';

/** The sim engine's version: what `sim-engine --version` prints, and what server.yaml names under engines.sim. */
export const SIM_ENGINE_VERSION = '1.0.0';

/** llmgw's own sim engine: the same shape of flags as the real engines' multi-node ones. */
const simCommand: EngineBuilder<'sim'> = (l) => ({
  program: 'sim',
  args: [
    '--model',
    l.model,
    // The HTTP API on loopback: only the node's door reaches it (lib/node-door.ts).
    '--host',
    engineApiHost(l),
    '--port',
    String(l.port),
    '--rank',
    String(l.rank),
    '--world',
    String(l.world),
    '--dist-host',
    l.distHost,
    '--dist-port',
    String(l.distPort),
    // The node's GPU locks: the sim engine refuses a GPU another one holds (real engines fail on it, less clearly).
    ...(l.gpuLockDir ? ['--gpu-lock-dir', l.gpuLockDir] : []),
    ...l.profile.args,
  ],
});

/** The sim engine's spec. */
export const sim = defineEngine({
  name: 'sim',
  title: 'sim',
  programs: ['sim'],
  helpArgs: { sim: ['--help'] },
  versionArgs: ['--version'],
  parseVersion: parseDottedVersion,
  // Onboarding starts it the way the agent does (cli/engine-probe.ts).
  install: { kind: 'builtin', version: SIM_ENGINE_VERSION, probeArgs: ['engine-probe', 'sim', '--timeout', '60'] },
  binPrograms: (bin) => ({ sim: [bin] }),
  venvPrograms: () => ({}),
  needsNvidiaGpu: false,
  needsLibgomp: false,
  // Worker ranks get everything from rank 0.
  rankNeedsWeights: (rank) => rank === 0,
  // Rank 0 binds the dist-init port; workers retry joining it for two minutes.
  rankStart: 'head-first',
  // Rank 0's dist-init port, which the other ranks join (lib/sim/group.ts), as vLLM's and SGLang's master port.
  rankPorts: (l) => (l.world > 1 && l.rank === 0 ? [l.distPort] : []),
  // Like llama-server without --embeddings: it serves completions only.
  embeds: () => false,
  embedsWith: 'the sim engine serves no embeddings',
  command: simCommand,
});
