/**
 * Running an engine's own programs to ask them what they are: their help (what engine-check reads) and their
 * version. Used by `llmgw ctl engine-check --bin` and by the node agent's engine probe, which runs every engine
 * it offers before offering it — so a missing library or a removed flag fails there, not at a model load.
 */
import { dirname, join } from 'node:path';
import { helpDocuments } from './check';
import { ENGINE_SPECS, type EngineProgram } from './registry';
import { runCommand } from '../hardware/exec';
import type { EngineName } from '../types';

/** Each program of an installed engine -> the argv prefix that runs it on this machine. */
export type EnginePrograms = Partial<Record<EngineProgram, string[]>>;

/** Runs an argv (lib/hardware/exec's runCommand), output and errors together: what a help or an error message reads. */
export async function runArgv(
  argv: readonly string[],
  o: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<{ code: number | null; output: string; error?: string }> {
  const [file, ...args] = argv;
  if (!file) return { code: null, output: '', error: 'no program to run' };
  const r = await runCommand(file, args, {
    timeoutMs: o.timeoutMs ?? 120_000,
    maxBuffer: 64 << 20,
    ...(o.env ? { env: o.env } : {}),
  });
  const output = `${r.stdout}${r.stderr}`;
  if (r.error)
    return {
      code: null,
      output,
      error:
        r.error === 'ETIMEDOUT'
          ? `no answer within ${(o.timeoutMs ?? 120_000) / 1000}s`
          : `cannot run ${file}: ${r.error}`,
    };
  return { code: r.code, output };
}

/** The environment a help run of the engine's programs needs (its spec's helpEnv, each variable unless already set). */
function helpEnv(engine: EngineName): NodeJS.ProcessEnv {
  const defaults = Object.entries(ENGINE_SPECS[engine].helpEnv ?? {});
  return defaults.length
    ? { ...process.env, ...Object.fromEntries(defaults.map(([k, v]) => [k, process.env[k] ?? v])) }
    : process.env;
}

/** The last `n` non-empty lines of a program's output: what an error message quotes. */
export function tailLines(text: string, n: number): string {
  return text
    .trim()
    .split('\n')
    .filter((l) => l.trim() !== '')
    .slice(-n)
    .join('\n');
}

/**
 * A program's whole help, or why there is none: it could not run, printed nothing, or failed before printing
 * its help (vLLM without torch; a binary missing libgomp.so.1) — which would otherwise read as every flag missing.
 */
export async function programHelp(
  engine: EngineName,
  program: EngineProgram,
  prefix: readonly string[],
): Promise<{ kind: 'help'; text: string } | { kind: 'failed'; command: string; why: string }> {
  const helpArgs = (ENGINE_SPECS[engine].helpArgs as Partial<Record<EngineProgram, readonly string[]>>)[program];
  if (!helpArgs) return { kind: 'failed', command: program, why: `${program} is not a program of ${engine}` };
  const argv = [...prefix, ...helpArgs];
  const command = [...prefix.slice(-1), ...helpArgs].join(' ');
  const r = await runArgv(argv, { env: helpEnv(engine) });
  if (r.error) return { kind: 'failed', command, why: r.error };
  if (!r.output.trim()) return { kind: 'failed', command, why: `printed nothing (exit ${r.code})` };
  if (r.code !== 0 && !helpDocuments(r.output, '--help'))
    return {
      kind: 'failed',
      command,
      why: `failed (exit ${r.code}) without printing its help:\n${tailLines(r.output, 8)}`,
    };
  return { kind: 'help', text: r.output };
}

/** What the engine's main program says its version is (its first line that names one), or null. */
export async function programVersion(engine: EngineName, prefix: readonly string[]): Promise<string | null> {
  const r = await runArgv([...prefix, ...ENGINE_SPECS[engine].versionArgs], { timeoutMs: 60_000 });
  if (r.code !== 0) return null;
  return parseVersion(engine, r.output);
}

/** The version in a program's output as server.yaml names it (llama.cpp's `(build 11434` -> b11434; `0.33.0`), or null. */
export function parseVersion(engine: EngineName, output: string): string | null {
  return ENGINE_SPECS[engine].parseVersion(output);
}

/**
 * An operator's own binary as an engine's programs: llama-server with its ggml-rpc-server beside it, the `vllm`
 * entrypoint, or the python that has SGLang installed.
 */
export function binPrograms(engine: EngineName, bin: string): EnginePrograms {
  return ENGINE_SPECS[engine].binPrograms(bin, (name) => join(dirname(bin), name));
}
