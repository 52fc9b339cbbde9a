/** `llmgw ctl fabrics`: each fabric, its nodes, subnet manager, adapters and warnings, from the node list (GET /v1/nodes). */
import { fabricGroups, type FabricGroup } from '../../../lib/placement';
import type { NodeRecord } from '../../../lib/types';
import { table } from '../../table';

/** What GET /v1/nodes returns per node, as far as this view needs it. */
export type NodeListEntry = Pick<NodeRecord, 'id' | 'state' | 'inventory'>;

/** The fabrics of a node list (placement's grouping: it reads only ids and inventories). */
export function listFabricGroups(nodes: NodeListEntry[]): FabricGroup[] {
  return fabricGroups(nodes as NodeRecord[]);
}

export interface FabricView {
  /** The declared name */
  fabric: string;
  /** The group placement uses: `ib-a`, or `ib-a@<smGuid>` / `ib-a@unknown` when one name covers several fabrics */
  key: string;
  smGuid: string | null;
  nodes: {
    id: string;
    state: string;
    adapters: string[];
    strength: 'sm-guid' | 'declared-only' | 'unknown';
    note?: string;
  }[];
  warnings: string[];
}

export interface FabricsView {
  fabrics: FabricView[];
  /** Nodes with no fabric: single-node replicas only */
  islands: string[];
}

const smLabel = (g: Pick<FabricGroup, 'smGuid'>): string => (g.smGuid ? `SM ${g.smGuid}` : 'SM unknown');

/** The fabrics of the cluster, with what an operator should know about each. */
export function fabricsView(nodes: NodeListEntry[]): FabricsView {
  const groups = listFabricGroups(nodes);
  const fabrics = groups.map((g): FabricView => {
    const members = g.members.map((n) => {
      const idn = n.inventory.fabricIdentity?.[g.name];
      return {
        id: n.id,
        state: n.state,
        adapters: n.inventory.fabrics[g.name] ?? [],
        strength: idn?.strength ?? ('unknown' as const),
        ...(idn?.note ? { note: idn.note } : {}),
      };
    });
    const warnings: string[] = [];
    if (g.split) {
      const others = groups
        .filter((o) => o.name === g.name && o.key !== g.key)
        .map((o) => `${smLabel(o)}: ${o.members.map((n) => n.id).join(', ')}`);
      warnings.push(
        `one of ${others.length + 1} fabrics named ${g.name} (their ports see different subnet managers): a replica never spans them; the other side${others.length > 1 ? 's' : ''}: ${others.join('; ')}`,
      );
      if (!g.smGuid)
        warnings.push(
          `these nodes take no multi-node replica on ${g.name} until their agents read the SM (run them as root with infiniband-diags)`,
        );
    }
    const weak = members.filter((m) => m.strength !== 'sm-guid').map((m) => m.id);
    if (weak.length)
      warnings.push(`${weak.join(', ')}: subnet manager not identified, name trusted as declared (weaker)`);
    const notReady = members.filter((m) => m.state !== 'ready').map((m) => `${m.id}: ${m.state}`);
    if (notReady.length) warnings.push(notReady.join(', '));
    if (members.length === 1) warnings.push('one node: a multi-node replica needs two or more');
    return { fabric: g.name, key: g.key, smGuid: g.smGuid, nodes: members, warnings };
  });
  const islands = nodes.filter((n) => Object.keys(n.inventory.fabrics).length === 0).map((n) => n.id);
  return { fabrics, islands };
}

/** The view as a table; islands last. */
export function formatFabrics(view: FabricsView): string {
  const rows = view.fabrics.map((f) => [
    f.fabric,
    f.smGuid ?? (f.nodes.every((n) => n.strength === 'sm-guid') ? 'unknown' : 'unknown (declared only)'),
    f.nodes.map((n) => n.id).join(','),
    f.nodes.map((n) => `${n.id}:${n.adapters.join(',')}`).join(' '),
    f.warnings.join('; ') || '-',
  ]);
  if (view.islands.length)
    rows.push(['(island)', '-', view.islands.join(','), '-', 'no fabric: single-node replicas only']);
  if (rows.length === 0) return 'no nodes registered\n';
  return table(['FABRIC', 'SUBNET MANAGER', 'NODES', 'ADAPTERS', 'WARNINGS'], rows);
}

/**
 * The node list's FABRIC cell for `node`: `ib-a(mlx5_0,mlx5_1)`, marked `[declared only]` when its SM was not
 * read and `[split: SM 0x…]` when its name covers several fabrics; `island` with none. `groups` are the list's
 * `listFabricGroups`, made once for every row (made per row, they cost 50-70 ms at 1,000 nodes).
 */
export function fabricColumn(node: NodeListEntry, groups: FabricGroup[]): string {
  const cells = Object.entries(node.inventory.fabrics).map(([f, devs]) => {
    const g = groups.find((x) => x.name === f && x.members.some((m) => m.id === node.id));
    const weak = node.inventory.fabricIdentity?.[f]?.strength === 'declared-only';
    const marks = [...(g?.split ? [`split: ${smLabel(g)}`] : []), ...(weak ? ['declared only'] : [])];
    return `${f}(${devs.join(',')})${marks.length ? `[${marks.join('; ')}]` : ''}`;
  });
  return cells.join(' ') || 'island';
}
