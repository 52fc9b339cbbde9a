/** `llmgw ctl nodes`: every node with its state, GPUs, fabrics, engines, replicas, checks and certificate. */
import type { GpuShard, NodeCertificate } from '../../gateway/control/contract';
import { doctorColumn } from '../../lib/doctor/format';
import type { NodeRecord } from '../../lib/types';
import { ago, table } from '../table';
import { fabricColumn, listFabricGroups } from './views/fabrics';
import { getJson, type CtlVerb } from './verb';

/** A node as GET /v1/nodes lists it. */
export type NodeRow = NodeRecord & {
  replicas: string[];
  gpusUsed: number;
  gpuShards?: GpuShard[];
  cert?: NodeCertificate | null;
};

/** The REPLICAS cell: each replica placed on the node, with the GPU indices its shard holds there (`m-0[0,1]`). */
export function replicaColumn(n: Pick<NodeRow, 'replicas' | 'gpuShards'>): string {
  return (
    n.replicas
      .map((id) => {
        const gpus = (n.gpuShards ?? []).filter((s) => s.replicaId === id).flatMap((s) => s.gpus);
        return gpus.length ? `${id}[${gpus.join(',')}]` : id;
      })
      .join(',') || '-'
  );
}

/** The CERT cell: loud when the agent missed its renewal window (two thirds of the lifetime) or the certificate expired. */
export function certColumn(c: NodeCertificate | null | undefined, now = Date.now()): string {
  if (!c) return '-';
  if (c.revoked) return 'revoked';
  const notAfter = Date.parse(c.notAfter);
  if (now >= notAfter) return `EXPIRED ${ago(notAfter, now)}`;
  if (now >= Date.parse(c.renewAt)) return `RENEW OVERDUE (expires ${c.notAfter.slice(0, 10)})`;
  return `ok until ${c.notAfter.slice(0, 10)}`;
}

/**
 * Renders the node list as a table; CHECKS names the node's failing and warning doctor checks (`llmgw doctor` on
 * it says more), CERT its certificate (renewal overdue, expired).
 */
export function formatNodes(nodes: NodeRow[], now = Date.now()): string {
  const groups = listFabricGroups(nodes);
  const rows = table(
    ['NODE', 'STATE', 'GPUS', 'FABRIC', 'ENGINES', 'REPLICAS', 'CHECKS', 'CERT', 'LAST SEEN'],
    nodes.map((n) => [
      n.id,
      n.state,
      `${n.gpusUsed}/${n.inventory.gpus.length}`,
      fabricColumn(n, groups),
      engineColumn(n),
      replicaColumn(n),
      doctorColumn(n.inventory.doctor),
      certColumn(n.cert, now),
      n.lastSeen ? ago(new Date(n.lastSeen).getTime(), now) : 'never',
    ]),
  );
  // Why an engine is not offered, in the engine's own words: the table cell only says that it failed (a skipped one,
  // not installed here on purpose, is not in the cell at all).
  const failed = nodes.flatMap((n) =>
    (n.engineStatus ?? [])
      .filter((s) => s.state !== 'offered')
      .map((s) =>
        `${n.id}: ${s.engine} ${s.version || ''} ${s.state === 'failed' ? 'not offered' : 'not installed'}: ${s.reason ?? 'unknown'}`.replace(
          '  ',
          ' ',
        ),
      ),
  );
  return failed.length
    ? `${rows}\n${failed
        .map((f) =>
          f
            .split('\n')
            .map((l, i) => (i ? `    ${l}` : l))
            .join('\n'),
        )
        .join('\n')}\n`
    : rows;
}

/** The ENGINES cell: each engine with its version, FAILED for one that did not pass (reasons below the table). */
export function engineColumn(n: Pick<NodeRow, 'engineStatus' | 'inventory'>): string {
  if (!n.engineStatus)
    return n.inventory.engines.length ? `${n.inventory.engines.join(',')} (not probed yet)` : 'probing…';
  const cells = n.engineStatus
    .filter((s) => s.state !== 'skipped')
    .map((s) => `${s.engine} ${s.version || '?'}${s.state === 'failed' ? ' FAILED' : ''}`);
  return cells.join(', ') || 'none';
}

/** `ctl nodes` */
export const nodes: CtlVerb = {
  help: `  nodes                       nodes: state, GPUs used/total, fabrics (marked when a name covers two subnet
                              managers or its SM was not read), engines, replicas[GPU indices held], failing doctor checks,
                              last seen`,
  async run({ api, values, out }) {
    const { nodes: list } = await getJson<{ nodes: NodeRow[] }>(api, `${api.server}/v1/nodes`);
    out(values.json ? `${JSON.stringify(list, null, 2)}\n` : formatNodes(list));
  },
};
