/**
 * The flags that name an operator's own engine binary (`--llamacpp-bin`, `--vllm-bin`, `--sglang-python`), one
 * per engine llmgw installs, as the engine registry spells them: their options, their usage lines and their
 * values as `bins`. The agent takes them, and onboard-node and add-node pass them on to the node's agent.
 */
import { ENGINE_SPECS, INSTALLED_ENGINES, type BinOption, type OperatorBins } from '../lib/engines/registry';

/** Each installed engine's flag, in ENGINES order. */
const FLAGS = INSTALLED_ENGINES.map((engine) => ({ engine, ...ENGINE_SPECS[engine].install.operator }));

/** The flag's option name as parseArgs knows it. */
function optionOf(flag: string): BinOption {
  return flag.slice(2) as BinOption;
}

/** The parseArgs options of the flags. */
export const ENGINE_BIN_OPTIONS = Object.fromEntries(
  FLAGS.map((f) => [optionOf(f.flag), { type: 'string' }]),
) as Record<BinOption, { type: 'string' }>;

/** The flags' values (paths), as parseArgs gives them. */
export type EngineBinValues = Partial<Record<BinOption, string>>;

/** The flags' values as `bins`, each path through `path` (the agent resolves its own; onboarding's are the node's). */
export function engineBins(values: EngineBinValues, path: (p: string) => string = (p) => p): OperatorBins {
  const bins: OperatorBins = {};
  for (const f of FLAGS) {
    const value = values[optionOf(f.flag)];
    if (value) bins[f.engine] = path(value);
  }
  return bins;
}

/** The agent's usage lines for the flags, their help starting at column `column`. */
export function agentBinUsage(column: number): string {
  return FLAGS.map((f) => `  ${f.flag} PATH`.padEnd(column) + f.help).join('\n');
}

/**
 * Onboarding's usage lines for the flags (`<binary> on the node, …`), their help starting at column `column`:
 * the first says what onboarding does with it (`first`), the others say `likewise`.
 */
export function nodeBinUsage(column: number, first: string): string {
  return FLAGS.map(
    (f, i) => `  ${f.flag} PATH`.padEnd(column) + `${f.binary} on the node, ${i === 0 ? first : 'likewise'}`,
  ).join('\n');
}
