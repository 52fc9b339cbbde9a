/**
 * The engine registry: every engine of ENGINES (lib/types.ts) and its spec (lib/engines/<engine>.ts). A name
 * in ENGINES without a line here, or a line without a name there, does not compile. Pure: the replica
 * workflow reads it (lib/weights/source.ts), and workflow contracts take its types.
 */
import { ENGINES, type EngineName } from '../types';
import { llamacpp } from './llamacpp';
import { sglang } from './sglang';
import { sim } from './sim';
import type { EngineSpec } from './spec';
import { vllm } from './vllm';

/** Each engine's spec, by name. */
export const ENGINE_SPECS = {
  sim,
  llamacpp,
  vllm,
  sglang,
} as const satisfies { readonly [E in EngineName]: EngineSpec<E> };

type Specs = typeof ENGINE_SPECS;

/** A program of an engine a command runs; the node resolves it to a path in that engine's install. */
export type EngineProgram = Specs[EngineName]['programs'][number];

/** An engine llmgw installs (from PyPI, or the operator's own binary) rather than carries: every one but sim. */
export type InstalledEngine = {
  [E in EngineName]: Specs[E]['install'] extends { kind: 'installed' } ? E : never;
}[EngineName];

/** The agent flags' names as options (without their dashes) that name an operator's own engine binary: `llamacpp-bin`, … */
export type BinOption = OptionOf<Specs[InstalledEngine]['install']['operator']['flag']>;
type OptionOf<F> = F extends `--${infer O}` ? O : never;

/** The operator's own engine binaries on a node, by engine (`--llamacpp-bin`, `--vllm-bin`, `--sglang-python`). */
export type OperatorBins = Partial<Record<EngineName, string>>;

/** True for an engine llmgw installs rather than carries. */
export function isInstalled(engine: EngineName): engine is InstalledEngine {
  return ENGINE_SPECS[engine].install.kind === 'installed';
}

/** The engines llmgw installs, in ENGINES order (engine-check's engines, the agent's binary flags). */
export const INSTALLED_ENGINES: readonly InstalledEngine[] = ENGINES.filter(isInstalled);

/**
 * Why no profile of a model can serve /v1/embeddings (each profile's engine and what would make it embed), or
 * null when one can or its engine decides by the model.
 */
export function embeddingRefusal(profiles: readonly { engine: EngineName; args: readonly string[] }[]): string | null {
  if (profiles.length === 0 || profiles.some((p) => ENGINE_SPECS[p.engine]?.embeds(p.args) !== false)) return null;
  return [...new Set(profiles.map((p) => ENGINE_SPECS[p.engine].embedsWith))].join('; ');
}
