/** `llmgw doctor`: what a node lacks before it joins, each check pass/warn/fail with its fix in one line. */
import { join } from 'node:path';
import { ENGINE_SPECS } from '../engines/registry';
import { discoverFabricIdentity, type FabricDiscovery } from '../fabrics';
import { runCommand, type Exec } from '../hardware/exec';
import { readIbAdapters } from '../hardware/infiniband';
import { queryGpus, type GpuQuery } from '../hardware/nvidia';
import type { DoctorResult, EngineName, IbAdapter } from '../types';
import { checkFabrics, checkSubnetManagers } from './fabric';
import { checkFabricManager, checkGpuDirect, checkImex, checkNvidiaSmi } from './gpu';
import { checkCpuFlags, checkLibgomp } from './host';

export { doctorColumn, doctorFailed, formatDoctor } from './format';

export interface DoctorOptions {
  /** nvidia-smi to run; null for a node declared GPU-less (--no-gpu) */
  nvidiaSmi: string | null;
  /** `--fabric` values as given */
  fabrics: string[];
  /** filesystem root for /proc, /etc, /dev and library paths (default /) */
  root?: string;
  /** sysfs root holding class/infiniband and module/ (default /sys; the agent's --ib-root) */
  sysRoot?: string;
  /** default <root>/proc/cpuinfo */
  cpuinfo?: string;
  /** default `sminfo` */
  sminfo?: string;
  /** The node's engines; libgomp is required only with one whose spec needs it (llamacpp). Default: required. */
  engines?: EngineName[];
  /** Runs nvidia-smi, sminfo, systemctl and ldconfig (default: runCommand) */
  exec?: Exec;
  /** What the agent already discovered, so doctor does not ask nvidia-smi and sminfo twice */
  known?: { gpus?: GpuQuery; adapters?: IbAdapter[]; fabrics?: FabricDiscovery };
}

/** Runs every check. Never throws for what it finds: a missing tool or file is a result. */
export async function runDoctor(opts: DoctorOptions): Promise<DoctorResult[]> {
  const root = opts.root ?? '/';
  const sysRoot = opts.sysRoot ?? join(root, 'sys');
  const exec = opts.exec ?? runCommand;
  const gpus = opts.nvidiaSmi === null ? null : (opts.known?.gpus ?? (await queryGpus(opts.nvidiaSmi, exec)));
  const adapters = opts.known?.adapters ?? (await readIbAdapters(sysRoot));
  const fabrics =
    opts.known?.fabrics ??
    (await discoverFabricIdentity({
      flags: opts.fabrics,
      adapters,
      ibRoot: sysRoot,
      sminfo: opts.sminfo ?? 'sminfo',
      run: exec,
    }));
  const gpuNode = opts.nvidiaSmi !== null;
  return [
    await checkNvidiaSmi(opts.nvidiaSmi, gpus, root),
    await checkCpuFlags(opts.cpuinfo ?? join(root, 'proc/cpuinfo')),
    await checkLibgomp(
      root,
      exec,
      opts.engines === undefined || opts.engines.some((e) => ENGINE_SPECS[e].needsLibgomp),
    ),
    checkFabrics(opts.fabrics, adapters, fabrics),
    ...checkSubnetManagers(opts.fabrics, fabrics),
    await checkGpuDirect(sysRoot, root, gpuNode && opts.fabrics.length > 0),
    await checkFabricManager(root, sysRoot, exec),
    await checkImex(root, exec, gpus?.kind === 'ok' ? gpus.gpus.map((g) => g.name) : []),
  ];
}
