/** CPU flags that engines need (the kvm64 lesson: a VM on Proxmox's default CPU type lacks AVX). */
import { readFile } from 'node:fs/promises';

export const CPU_FLAGS = ['avx', 'avx2', 'fma', 'sse4_2'] as const;

/** The CPU_FLAGS present in the first processor's `flags` line. */
export function parseCpuFlags(cpuinfo: string): string[] {
  const line = cpuinfo.split('\n').find((l) => /^flags\s*:/.test(l)) ?? '';
  const have = new Set(
    line
      .replace(/^flags\s*:/, '')
      .trim()
      .split(/\s+/),
  );
  return CPU_FLAGS.filter((f) => have.has(f));
}

/** Reads /proc/cpuinfo (or a fixture). */
export async function readCpuFlags(path = '/proc/cpuinfo'): Promise<string[]> {
  return parseCpuFlags(await readFile(path, 'utf8'));
}
