/** GPU checks: nvidia-smi where configured, GPUDirect RDMA, Fabric Manager on NVSwitch systems, IMEX on NVLink multi-node systems. */
import type { Exec } from '../hardware/exec';
import type { GpuQuery } from '../hardware/nvidia';
import type { DoctorResult } from '../types';
import { exists, fail, list, pass, readText, warn } from './read';

/** Why nvidia-smi failed, as a fix; by exit code (notes: 9 no driver, 18 library mismatch, 6 no devices). */
function smiFix(reason: string, containerDriver: boolean): string {
  if (/not found at/.test(reason)) {
    return containerDriver
      ? "this node's driver runs in the GPU Operator's container: pass --nvidia-smi a wrapper running `chroot /run/nvidia/driver nvidia-smi`"
      : 'install the NVIDIA driver, pass --nvidia-smi PATH (a containerised driver puts it elsewhere), or --no-gpu for a node without GPUs';
  }
  const code = Number(/\(exit (\d+)\)/.exec(reason)?.[1]);
  if (code === 9) return 'load the NVIDIA driver (modprobe nvidia, or reboot after installing it)';
  if (code === 18)
    return 'the driver was upgraded under a loaded module: reboot, or unload and reload the nvidia modules';
  if (code === 6) return "no GPU is visible: check lspci, the VM's PCI passthrough, or pass --no-gpu";
  return 'run the same nvidia-smi by hand to see why';
}

/** nvidia-smi reachable at the configured path; a node that cannot run it must not register as GPU-less. */
export async function checkNvidiaSmi(path: string | null, gpus: GpuQuery | null, root: string): Promise<DoctorResult> {
  const id = 'nvidia-smi';
  if (path === null || gpus === null) return pass(id, 'not run: --no-gpu (this node registers without GPUs)');
  if (gpus.kind === 'failed') {
    // queryGpus's reason for a missing binary carries its own fix; the fix goes in `fix` here.
    const summary = /not found at/.test(gpus.reason)
      ? `nvidia-smi not found at ${path}: the agent will not register this node as one without GPUs`
      : gpus.reason;
    return fail(id, summary, smiFix(gpus.reason, await exists(root, 'run/nvidia/driver/usr/bin/nvidia-smi')));
  }
  if (gpus.gpus.length === 0)
    return warn(id, `nvidia-smi at ${path} lists no GPUs`, "check the VM's PCI passthrough, or pass --no-gpu");
  const names = [...new Set(gpus.gpus.map((g) => g.name))].join(', ');
  return pass(id, `${gpus.gpus.length} GPU${gpus.gpus.length === 1 ? '' : 's'} (${names}) via ${path}`);
}

/** Column 1 of /proc/modules (a module's used-by column names others, e.g. nvidia's lists nvidia_peermem). */
export function loadedModules(procModules: string): Set<string> {
  return new Set(
    procModules
      .split('\n')
      .map((l) => l.split(' ')[0] ?? '')
      .filter(Boolean),
  );
}

const PEERMEM_SYSFS = [
  'module/nvidia_peermem',
  'kernel/mm/memory_peers/nv_mem/version',
  'kernel/mm/memory_peers/nv_mem_nc/version',
  'module/nv_peer_mem',
];

/** GPUDirect RDMA on a GPU node with fabrics: the paths NCCL itself tests, then /proc/modules. */
export async function checkGpuDirect(sysRoot: string, root: string, applies: boolean): Promise<DoctorResult> {
  const id = 'gpudirect-rdma';
  if (!applies) return pass(id, 'n/a: needs a GPU node with a fabric');
  for (const p of PEERMEM_SYSFS) if (await exists(sysRoot, p)) return pass(id, `GPUDirect RDMA module loaded (${p})`);
  const mods = loadedModules((await readText(root, 'proc/modules')) ?? '');
  const found = ['nvidia_peermem', 'nv_peer_mem'].find((m) => mods.has(m));
  if (found) return pass(id, `GPUDirect RDMA module ${found} loaded (/proc/modules)`);
  return warn(
    id,
    'nvidia_peermem is not loaded: NCCL logs "GPU Direct RDMA Disabled" and stages transfers through host memory unless DMA-BUF works',
    'modprobe nvidia_peermem and add it to /etc/modules-load.d/ (or rely on DMA-BUF: kernel >= 5.12, open GPU kernel modules, CUDA >= 11.7)',
  );
}

/** NVSwitches on this node: /dev/nvidia-nvswitchN, or PCI bridges of NVIDIA's (vendor 0x10de, class 0x068000). */
export async function countNvSwitches(root: string, sysRoot: string): Promise<number> {
  const devs = (await list(root, 'dev')).filter((d) => /^nvidia-nvswitch\d+$/.test(d)).length;
  if (devs) return devs;
  let pci = 0;
  for (const d of await list(sysRoot, 'bus/pci/devices')) {
    const [vendor, cls] = await Promise.all([
      readText(sysRoot, `bus/pci/devices/${d}/vendor`),
      readText(sysRoot, `bus/pci/devices/${d}/class`),
    ]);
    if (vendor?.trim() === '0x10de' && cls?.trim() === '0x068000') pci++;
  }
  return pci;
}

/** `systemctl is-active UNIT`: 'active', another state, or null when systemd cannot be asked. */
async function unitState(exec: Exec, unit: string): Promise<string | null> {
  const r = await exec('systemctl', ['is-active', unit]);
  if (r.error) return null;
  return r.code === 0 ? 'active' : r.stdout.trim() || `exit ${r.code}`;
}

/** NVIDIA Fabric Manager must run where there are NVSwitches, or CUDA fails with error 802. */
export async function checkFabricManager(root: string, sysRoot: string, exec: Exec): Promise<DoctorResult> {
  const id = 'fabric-manager';
  const n = await countNvSwitches(root, sysRoot);
  if (n === 0) return pass(id, 'n/a: no NVSwitch on this node');
  const state = await unitState(exec, 'nvidia-fabricmanager');
  const fix =
    'install nvidia-fabricmanager matching the driver version, then: systemctl enable --now nvidia-fabricmanager';
  if (state === 'active') return pass(id, `${n} NVSwitches; nvidia-fabricmanager is active`);
  if (state === null)
    return warn(
      id,
      `${n} NVSwitches; systemctl could not be run to check nvidia-fabricmanager`,
      'check that nv-fabricmanager runs (it listens on 127.0.0.1:6666)',
    );
  return fail(
    id,
    `${n} NVSwitches but nvidia-fabricmanager is ${state}: CUDA fails with error 802 "system not yet initialized"`,
    fix,
  );
}

const IP_RE = /^(\d{1,3}(\.\d{1,3}){3}|[0-9a-f:]+:[0-9a-f:]*)$/i;

/** IMEX on NVLink multi-node systems (GB200/GB300): every tray of the domain listed in the nodes file, service active. */
export async function checkImex(root: string, exec: Exec, gpuNames: string[]): Promise<DoctorResult> {
  const id = 'imex';
  const config = await readText(root, 'etc/nvidia-imex/config.cfg');
  const nvl = gpuNames.some((n) => /GB200|GB300/.test(n));
  if (!nvl && config === null)
    return pass(id, 'n/a: not an NVLink multi-node system (no GB200/GB300 GPU, no /etc/nvidia-imex/config.cfg)');
  const nodesPath =
    /^IMEX_NODE_CONFIG_FILE=(.+)$/m.exec(config ?? '')?.[1]?.trim() ?? '/etc/nvidia-imex/nodes_config.cfg';
  const fixNodes = `list the IP of every tray in this NVLink domain, one per line, in ${nodesPath} (the same file on each), then systemctl restart nvidia-imex`;
  const text = await readText(root, nodesPath.replace(/^\//, ''));
  const lines = (text ?? '')
    .split('\n')
    .map((l) => l.replace(/#.*/, '').trim())
    .filter(Boolean);
  if (lines.length === 0)
    return fail(
      id,
      `${nodesPath} is ${text === null ? 'missing' : 'empty'}: IMEX cannot share GPU memory across the NVLink domain`,
      fixNodes,
    );
  const bad = lines.filter((l) => !IP_RE.test(l));
  if (bad.length) return fail(id, `${nodesPath} has lines that are not IP addresses: ${bad.join(', ')}`, fixNodes);
  const state = await unitState(exec, 'nvidia-imex');
  if (state === 'active') return pass(id, `${lines.length} nodes in ${nodesPath}; nvidia-imex is active`);
  if (state === null)
    return warn(
      id,
      `${lines.length} nodes in ${nodesPath}; systemctl could not be run to check nvidia-imex`,
      'check that nvidia-imex runs (nvidia-imex-ctl -N shows each node as C)',
    );
  return fail(
    id,
    `${lines.length} nodes in ${nodesPath} but nvidia-imex is ${state}`,
    'systemctl enable --now nvidia-imex',
  );
}
