/**
 * How a node's GPUs are connected, from `nvidia-smi topo -m`: one link label per pair (NV12, PIX, PXB, PHB, NODE,
 * SYS). Placement prefers GPUs joined by NVLink or one PCIe switch; without a matrix it takes the lowest free indices.
 * Pure (placement, and through it workflows, read it): lib/hardware/nvidia.ts runs the command.
 */
import type { GpuTopology } from '../types';

/** nvidia-smi colours its header on some drivers even into a pipe. */
const ANSI = /\x1b\[[0-9;]*m/g;

/**
 * Parses `nvidia-smi topo -m`: the header's GPU<n> columns, then each GPU<n> row's first cells (NIC columns,
 * CPU and NUMA affinity follow and are ignored). Throws naming what is missing when the text is not such a matrix.
 */
export function parseTopoMatrix(text: string): GpuTopology {
  const lines = text
    .replace(ANSI, '')
    .split('\n')
    .map((l) => l.trim().split(/\s+/));
  const head = lines.findIndex((cells) => cells.includes('GPU0'));
  if (head < 0) throw new Error('no GPU0 column in the nvidia-smi topo -m output');
  const columns = (lines[head] as string[]).filter((c) => /^GPU\d+$/.test(c));
  const links = columns.map((col) => {
    const cells =
      lines
        .slice(head + 1)
        .find((l) => l[0] === col)
        ?.slice(1, columns.length + 1) ?? [];
    if (cells.length !== columns.length)
      throw new Error(`row ${col} of the nvidia-smi topo -m matrix has ${cells.length} of ${columns.length} GPU cells`);
    return cells;
  });
  return { links };
}

/**
 * How close two GPUs are, higher is closer: NVLink by its number of links, then one PCIe switch (PIX), several
 * switches (PXB), the host bridge (PHB), one NUMA node (NODE), across sockets (SYS; SOC in old drivers).
 */
export function linkScore(label: string): number {
  const nv = /^NV(\d+)$/.exec(label);
  if (nv) return 100 + Number(nv[1]);
  return ({ PIX: 50, PXB: 40, PHB: 30, NODE: 20, SYS: 10, SOC: 10 } as Record<string, number>)[label] ?? 0;
}
