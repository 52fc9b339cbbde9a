/** NCCL's view of a rank's adapters: the environment that keeps a rank on its fabric's HCAs and no others. */
import { LlmgwError } from '../errors';
import { fabricPorts } from '../fabrics';
import type { NodeInventory } from '../types';

/**
 * `NCCL_IB_HCA` for `fabric` on this node, in NCCL's exact-match form: one leading `=` for the whole list,
 * each adapter with its port (`=mlx5_0:1,mlx5_1:1`). Without the `=` NCCL matches prefixes, so `mlx5_1`
 * would also select mlx5_10…mlx5_19, which may be cabled to another fabric.
 */
export function ncclIbHca(ports: { device: string; port: number }[]): string {
  return `=${ports.map((p) => `${p.device}:${p.port}`).join(',')}`;
}

/** The NCCL environment a multi-node rank on `nodeId` runs with: exactly its `fabric`'s adapters. */
export function rankFabricEnv(
  nodeId: string,
  inventory: Pick<NodeInventory, 'fabrics' | 'adapters'>,
  fabric: string,
): Record<string, string> {
  const devices = inventory.fabrics[fabric];
  if (!devices?.length) {
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      `node ${nodeId} declares no adapters on fabric ${fabric} (it declares: ${Object.keys(inventory.fabrics).join(', ') || 'none'}); placement should not have put a rank there`,
      { nodeId, fabric },
    );
  }
  return { NCCL_IB_HCA: ncclIbHca(fabricPorts(devices, inventory.adapters)) };
}

/**
 * Whether NCCL would use `device` port `port` under `spec` (a value of NCCL_IB_HCA), following NCCL's
 * parseStringList/matchIfList: leading `^` excludes, then `=` makes names exact; `name[:port]` entries;
 * without `=` a name matches as a prefix. Used to test what the emitted value selects.
 */
export function ncclHcaSelects(spec: string, device: string, port: number): boolean {
  let s = spec;
  const not = s.startsWith('^');
  if (not) s = s.slice(1);
  const exact = s.startsWith('=');
  if (exact) s = s.slice(1);
  const entries = s
    .split(',')
    .filter(Boolean)
    .map((e) => {
      const [name = '', p] = e.split(':');
      return { name, port: p === undefined || p === '' ? -1 : Number(p) };
    });
  if (entries.length === 0) return true;
  const hit = entries.some(
    (e) => (exact ? device === e.name : device.startsWith(e.name)) && (e.port === -1 || e.port === port),
  );
  return not ? !hit : hit;
}
