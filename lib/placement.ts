/** Placement: a pure function from cluster state and a profile to ranks on nodes, or a reason naming what is missing. */
import type { NodeId, NodeRecord, Profile } from './types';

export type Placement = { kind: 'placed'; fabric: string | null; nodes: NodeId[] } | { kind: 'unplaceable'; reason: string };

export interface PlaceInput {
  nodes: NodeRecord[];
  profile: Profile;
  /** GPUs already held on each node by other replicas' shards */
  usedGpus: Record<string, number>;
  exclude?: string[];
  /** Model name, only for messages (`<model>/<profile>`). */
  model?: string;
}

const freeGpus = (n: NodeRecord, used: Record<string, number>): number => n.inventory.gpus.length - (used[n.id] ?? 0);

/** Why a node cannot take a shard of `profile`, or null when it can. */
function unusable(n: NodeRecord, p: Profile, used: Record<string, number>, exclude: Set<string>): string | null {
  if (exclude.has(n.id)) return 'excluded (its last shard failed there)';
  if (n.state !== 'ready') return n.state;
  if (!n.inventory.engines.includes(p.engine)) return `no engine ${p.engine}`;
  const free = freeGpus(n, used);
  if (free < p.gpusPerNode) return `${Math.max(free, 0)} of ${p.gpusPerNode} GPUs free`;
  return null;
}

const byCapacity = (used: Record<string, number>) => (a: NodeRecord, b: NodeRecord): number =>
  freeGpus(b, used) - freeGpus(a, used) || a.id.localeCompare(b.id);

/** Places one replica of `profile`. Multi-node replicas stay inside one fabric; islands take single-node replicas only. */
export function place(input: PlaceInput): Placement {
  const { profile: p, usedGpus: used } = input;
  const exclude = new Set(input.exclude ?? []);
  const label = input.model ? `${input.model}/${p.name}` : p.name;
  const want = `${label} (${p.engine}, ${p.nodes > 1 ? `${p.nodes} nodes × ` : ''}${p.gpusPerNode} GPU${p.gpusPerNode === 1 ? '' : 's'}${p.nodes > 1 ? ' on one fabric' : ''})`;
  const lead = p.nodes <= 1 ? `no node can take ${want}` : `no placement for ${want}`;
  if (input.nodes.length === 0) return { kind: 'unplaceable', reason: `${lead}: no nodes registered` };
  const why = new Map(input.nodes.map((n) => [n.id as string, unusable(n, p, used, exclude)]));

  if (p.nodes <= 1) {
    const best = input.nodes.filter((n) => why.get(n.id) === null).sort(byCapacity(used))[0];
    if (best) return { kind: 'placed', fabric: null, nodes: [best.id] };
    return { kind: 'unplaceable', reason: `${lead}: ${input.nodes.map((n) => `${n.id}: ${why.get(n.id)}`).join('; ')}` };
  }

  const fabrics = new Map<string, NodeRecord[]>();
  for (const n of input.nodes) for (const f of Object.keys(n.inventory.fabrics)) fabrics.set(f, [...(fabrics.get(f) ?? []), n]);
  const options = [...fabrics.entries()]
    .map(([name, members]) => ({ name, members, usable: members.filter((n) => why.get(n.id) === null).sort(byCapacity(used)) }))
    .sort((a, b) => b.usable.length - a.usable.length || a.name.localeCompare(b.name));
  const fit = options.find((o) => o.usable.length >= p.nodes);
  if (fit) return { kind: 'placed', fabric: fit.name, nodes: fit.usable.slice(0, p.nodes).map((n) => n.id) };

  const parts = options.map((o) => {
    const blocked = o.members.filter((n) => why.get(n.id) !== null).map((n) => `${n.id}: ${why.get(n.id)}`);
    return `fabric ${o.name} has ${o.usable.length} of ${p.nodes} usable nodes${blocked.length ? ` (${blocked.join('; ')})` : ''}`;
  });
  const islands = input.nodes.filter((n) => Object.keys(n.inventory.fabrics).length === 0).map((n) => n.id);
  if (islands.length) parts.push(`${islands.join(', ')} ${islands.length === 1 ? 'is an island' : 'are islands'} (no fabric): single-node replicas only`);
  if (options.length === 0) parts.unshift('no node declares a fabric (start agents with --fabric NAME)');
  return { kind: 'unplaceable', reason: `${lead}: ${parts.join('; ')}` };
}
