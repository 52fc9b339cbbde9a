/**
 * What the node reports about itself: GPUs (nvidia-smi), InfiniBand adapters and fabric identity (sysfs,
 * sminfo), CPU flags and the `llmgw doctor` checks.
 */
import { doctorColumn, runDoctor } from '../../lib/doctor';
import { discoverFabricIdentity } from '../../lib/fabrics';
import { readCpuFlags } from '../../lib/hardware/cpu';
import { runCommand } from '../../lib/hardware/exec';
import { ensureSminfo } from '../../lib/hardware/ibdiags';
import { readIbAdapters } from '../../lib/hardware/infiniband';
import { queryComputeCaps, queryGpus, queryTopology } from '../../lib/hardware/nvidia';
import { LlmgwError } from '../../lib/errors';
import type { EngineName, NodeInventory } from '../../lib/types';
import type { AgentOptions } from './options';

/**
 * Everything the node reports about itself, with its fabrics' subnet-manager identity and its `llmgw doctor`
 * results. Fails loudly when nvidia-smi is missing or fails, and refuses (LLMGW_BAD_REQUEST, LLMGW_FABRIC_SPLIT)
 * a --fabric naming a missing, down or RoCE adapter, one adapter under two fabrics, or one fabric whose ports see
 * different subnet managers. Failed doctor checks are reported, not refused.
 */
export async function discover(
  opts: Omit<AgentOptions, 'tls' | 'engineSetup'>,
  engines?: EngineName[],
): Promise<NodeInventory> {
  const gpuQuery = opts.noGpu ? null : await queryGpus(opts.nvidiaSmi, runCommand);
  if (gpuQuery?.kind === 'failed')
    throw new LlmgwError('LLMGW_NVIDIA_SMI_FAILED', `${gpuQuery.reason} (or pass --no-gpu for a node that has none)`);
  const gpus = gpuQuery?.gpus ?? [];
  const gpuExtras = await gpuDetails(opts, gpus);
  const adapters = await readIbAdapters(opts.ibRoot);
  const sminfo = opts.sminfo ?? (await findSminfo(opts));
  const found = await discoverFabricIdentity({
    flags: opts.fabrics,
    adapters,
    ibRoot: opts.ibRoot,
    sminfo,
    run: runCommand,
  });
  if (found.kind === 'refused')
    throw new LlmgwError(found.error.code, `agent not started: ${found.error.message}`, found.error.context);
  for (const w of found.warnings) opts.log('fabric identity warning', { warning: w });
  const cpuFlags = await readCpuFlags(opts.cpuinfo);
  const doctor = await runDoctor({
    nvidiaSmi: opts.noGpu ? null : opts.nvidiaSmi,
    fabrics: opts.fabrics,
    sysRoot: opts.ibRoot,
    cpuinfo: opts.cpuinfo,
    sminfo,
    ...(engines ? { engines } : {}),
    known: { adapters, fabrics: found, ...(gpuQuery ? { gpus: gpuQuery } : {}) },
  });
  for (const r of doctor.filter((d) => d.status !== 'pass'))
    opts.log(`doctor: ${r.status} ${r.id}`, { summary: r.summary, fix: r.fix });
  opts.log('doctor', { checks: doctorColumn(doctor) });
  return {
    gpus,
    adapters,
    fabrics: found.fabrics,
    fabricIdentity: found.fabricIdentity,
    doctor,
    cpuFlags,
    engines: engines ?? [],
    host: opts.advertiseHost,
    ...gpuExtras,
  };
}

/**
 * What placement and the engine plan use beyond the GPU list: each GPU's compute capability (filled into `gpus`),
 * and how two or more GPUs are linked (`nvidia-smi topo -m`). Either missing is logged, never fatal: placement
 * then takes the lowest free indices.
 */
async function gpuDetails(
  opts: Pick<AgentOptions, 'nvidiaSmi' | 'log'>,
  gpus: NodeInventory['gpus'],
): Promise<Pick<NodeInventory, 'gpuTopology'>> {
  if (gpus.length === 0) return {};
  const caps = await queryComputeCaps(opts.nvidiaSmi, runCommand);
  for (const g of gpus) if (caps.has(g.index)) g.computeCap = caps.get(g.index);
  if (gpus.length < 2) return {};
  const topo = await queryTopology(opts.nvidiaSmi, runCommand);
  if ('failed' in topo) {
    opts.log('gpu topology unknown: placement takes the lowest free GPU indices', { reason: topo.failed });
    return {};
  }
  return { gpuTopology: topo.topology };
}

/**
 * sminfo for a node that declares fabrics: on PATH, or installed now (infiniband-diags) when the agent runs as
 * root; else a warning, and the fabric identity falls back to "declared only" (sminfo then fails to run).
 */
async function findSminfo(opts: Pick<AgentOptions, 'fabrics' | 'log'>): Promise<string> {
  if (opts.fabrics.length === 0) return 'sminfo';
  const r = await ensureSminfo({
    path: process.env.PATH ?? '',
    root: process.getuid?.() === 0,
    run: (c, a) => runCommand(c, a, { timeoutMs: 300_000 }),
    log: opts.log,
  });
  if (r.kind === 'found') return r.path;
  opts.log('fabric identity warning', { warning: r.why });
  return 'sminfo';
}
