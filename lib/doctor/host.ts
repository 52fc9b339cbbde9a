/** Host checks: the CPU flags engines need, and libgomp for llama.cpp. */
import { CPU_FLAGS } from '../hardware/cpu';
import type { Exec } from '../hardware/exec';
import type { DoctorResult } from '../types';
import { resolve } from 'node:path';
import { exists, fail, pass, readText, warn } from './read';

/** Checks the `flags` line of cpuinfo for avx, avx2, fma and sse4_2. */
export async function checkCpuFlags(cpuinfoPath: string): Promise<DoctorResult> {
  const id = 'cpu-flags';
  const text = await readText(resolve(cpuinfoPath), '');
  if (text === null) return warn(id, `cannot read ${cpuinfoPath}`, 'pass --cpuinfo PATH, or run on the node itself');
  const line = text.split('\n').find((l) => /^flags\s*:/.test(l));
  if (!line) {
    if (text.split('\n').some((l) => /^Features\s*:/.test(l)))
      return pass(id, 'not x86 (cpuinfo has a Features line, e.g. Grace/aarch64): avx/avx2/fma/sse4_2 do not apply');
    return warn(id, `${cpuinfoPath} has no flags line`, 'check that it is a Linux /proc/cpuinfo');
  }
  const have = new Set(
    line
      .replace(/^flags\s*:/, '')
      .trim()
      .split(/\s+/),
  );
  const missing = CPU_FLAGS.filter((f) => !have.has(f));
  if (missing.length === 0)
    return pass(id, `${CPU_FLAGS.join(' ')} present${have.has('avx512f') ? ' (and avx512f)' : ''}`);
  const model = text
    .split('\n')
    .find((l) => /^model name\s*:/.test(l))
    ?.replace(/^model name\s*:\s*/, '')
    .trim();
  const vm = have.has('hypervisor') ? 'a virtual CPU' : 'this CPU';
  // The kvm64 trap: Proxmox's old default CPU type hides AVX; llama.cpp then silently uses its scalar backend.
  return fail(
    id,
    `${vm}${model ? ` (${model})` : ''} lacks ${missing.join(', ')}: llama.cpp falls back to its scalar backend, and AVX2 builds die with SIGILL (exit 132)`,
    have.has('hypervisor')
      ? "set the VM's CPU type to host (Proxmox: qm set VMID --cpu host, then stop and start the VM)"
      : 'run engines on a CPU with AVX2 and FMA (x86-64-v3)',
  );
}

const GOMP_PATHS = [
  'usr/lib/x86_64-linux-gnu/libgomp.so.1',
  'lib/x86_64-linux-gnu/libgomp.so.1',
  'usr/lib64/libgomp.so.1',
  'usr/lib/aarch64-linux-gnu/libgomp.so.1',
  'usr/lib/libgomp.so.1',
];

/** llama.cpp links OpenMP: libgomp.so.1 in the linker cache (`ldconfig -p`) or a known library path under `root`. */
export async function checkLibgomp(root: string, exec: Exec, needed: boolean): Promise<DoctorResult> {
  const id = 'libgomp';
  if (!needed) return pass(id, "not needed: llama.cpp is not among this node's engines");
  const r = await exec('ldconfig', ['-p']);
  const cached = r.code === 0 && /^\s*libgomp\.so\.1\s/m.test(r.stdout);
  if (cached) return pass(id, 'libgomp.so.1 is in the linker cache (ldconfig -p)');
  for (const p of GOMP_PATHS) {
    if (await exists(root, p)) return pass(id, `libgomp.so.1 at /${p}`);
  }
  return fail(
    id,
    'libgomp.so.1 not found: llama.cpp would exit 127 with "error while loading shared libraries: libgomp.so.1"',
    'install it: apt-get install libgomp1 (Debian/Ubuntu) or dnf install libgomp (RHEL)',
  );
}
