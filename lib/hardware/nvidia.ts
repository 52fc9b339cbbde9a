/** GPUs from nvidia-smi's CSV. A missing or failing nvidia-smi is reported as that, never as "no GPUs". */
import type { Gpu, GpuTopology } from '../types';
import { parseTopoMatrix } from './gpu-topology';
import { runCommand, type CommandResult } from './exec';

export const NVIDIA_SMI_ARGS = ['--query-gpu=index,name,memory.total,uuid', '--format=csv,noheader,nounits'];

/** Parses `index, name, memory.total, uuid` lines; throws naming a malformed line. */
export function parseNvidiaSmiCsv(text: string): Gpu[] {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .map((line) => {
      const f = line.split(',').map((s) => s.trim());
      const [index, name, mem, uuid] = f;
      if (
        f.length !== 4 ||
        !/^\d+$/.test(index ?? '') ||
        !name ||
        !/^\d+$/.test(mem ?? '') ||
        !uuid?.startsWith('GPU-')
      ) {
        throw new Error(
          `unexpected nvidia-smi line ${JSON.stringify(line)}: expected "index, name, memory.total (MiB), uuid"`,
        );
      }
      return { index: Number(index), name, memoryMiB: Number(mem), uuid };
    });
}

export type GpuQuery = { kind: 'ok'; gpus: Gpu[] } | { kind: 'failed'; reason: string };

/** Runs nvidia-smi at `path` and parses its GPUs. */
export async function queryGpus(
  path: string,
  run: (cmd: string, args: string[]) => Promise<CommandResult> = runCommand,
): Promise<GpuQuery> {
  const r = await run(path, NVIDIA_SMI_ARGS);
  if (r.error === 'ENOENT')
    return {
      kind: 'failed',
      reason: `nvidia-smi not found at ${path}: install the NVIDIA driver or pass --nvidia-smi PATH (a containerised driver puts it elsewhere)`,
    };
  if (r.error) return { kind: 'failed', reason: `nvidia-smi at ${path} could not run (${r.error})` };
  if (r.code !== 0) {
    const first =
      `${r.stderr}\n${r.stdout}`
        .split('\n')
        .map((l) => l.trim())
        .find(Boolean) ?? 'no output';
    return { kind: 'failed', reason: `nvidia-smi at ${path} failed (exit ${r.code}): ${first}` };
  }
  try {
    return { kind: 'ok', gpus: parseNvidiaSmiCsv(r.stdout) };
  } catch (err) {
    return { kind: 'failed', reason: `nvidia-smi at ${path}: ${(err as Error).message}` };
  }
}

/** The compute-capability query, apart from the main one: drivers older than 510 refuse the field, and must not lose every GPU for it. */
export const NVIDIA_CC_ARGS = ['--query-gpu=index,compute_cap', '--format=csv,noheader,nounits'];

/** Each GPU's compute capability by index (`8.0`), or an empty map when this driver cannot say. */
export async function queryComputeCaps(
  path: string,
  run: (cmd: string, args: string[]) => Promise<CommandResult> = runCommand,
): Promise<Map<number, string>> {
  const r = await run(path, NVIDIA_CC_ARGS);
  const caps = new Map<number, string>();
  if (r.error || r.code !== 0) return caps;
  for (const line of r.stdout.split('\n')) {
    const m = /^\s*(\d+)\s*,\s*(\d+\.\d+)\s*$/.exec(line);
    if (m) caps.set(Number(m[1]), m[2] as string);
  }
  return caps;
}

/** What the agent runs to read how its GPUs are linked. */
export const NVIDIA_TOPO_ARGS = ['topo', '-m'];

/** Runs `nvidia-smi topo -m`; null (with why) when it fails: placement then takes the lowest free indices. */
export async function queryTopology(
  path: string,
  run: (cmd: string, args: string[]) => Promise<CommandResult> = runCommand,
): Promise<{ topology: GpuTopology } | { failed: string }> {
  const r = await run(path, NVIDIA_TOPO_ARGS);
  if (r.error || r.code !== 0)
    return {
      failed: `${path} topo -m failed (${r.error ?? `exit ${r.code}`}): ${`${r.stderr}\n${r.stdout}`.trim().split('\n')[0] ?? ''}`,
    };
  try {
    return { topology: parseTopoMatrix(r.stdout) };
  } catch (err) {
    return { failed: `${path} topo -m: ${(err as Error).message}` };
  }
}
