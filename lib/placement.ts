/** Placement: a pure function from cluster state and a profile to ranks on nodes, or a reason naming what is missing. */
import { freeCount, freeIndices, pickGpus } from './gpus';
import { groupBy } from './group';
import type { NodeId, NodeRecord, Profile } from './types';

/**
 * One fabric as placement sees it. Nodes declaring the same name whose ports see different subnet managers
 * (`inventory.fabricIdentity[name].smGuid`) are different fabrics: one group per SM GUID, and, when the name is
 * split, one more for its members whose SM is unknown (placement leaves them out: they may be on either side). A name
 * whose members agree on one GUID, or report none (older agents), is one group, exactly as before.
 */
export interface FabricGroup {
  /** `name`, or `name@<smGuid>` / `name@unknown` when the name is split */
  key: string;
  name: string;
  smGuid: string | null;
  /** true when other groups share this name */
  split: boolean;
  members: NodeRecord[];
}

/** The fabrics of `nodes`, in order of name then key. */
export function fabricGroups(nodes: NodeRecord[]): FabricGroup[] {
  const byName = new Map<string, NodeRecord[]>();
  for (const n of nodes)
    for (const f of Object.keys(n.inventory.fabrics)) {
      const members = byName.get(f);
      if (members) members.push(n);
      else byName.set(f, [n]);
    }
  const out: FabricGroup[] = [];
  for (const [name, members] of [...byName.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    const guidOf = (n: NodeRecord): string | null => n.inventory.fabricIdentity?.[name]?.smGuid ?? null;
    const guids = [...new Set(members.map(guidOf).filter((g): g is string => g !== null))].sort();
    if (guids.length <= 1) {
      out.push({ key: name, name, smGuid: guids[0] ?? null, split: false, members });
      continue;
    }
    for (const g of guids)
      out.push({ key: `${name}@${g}`, name, smGuid: g, split: true, members: members.filter((n) => guidOf(n) === g) });
    const unknown = members.filter((n) => guidOf(n) === null);
    if (unknown.length) out.push({ key: `${name}@unknown`, name, smGuid: null, split: true, members: unknown });
  }
  return out;
}

/** Ranks on nodes (rank r on `nodes[r]`, holding the GPU indices `gpus[r]` there), or why there is no room. */
export type Placement =
  | { kind: 'placed'; fabric: string | null; nodes: NodeId[]; gpus: number[][] }
  | { kind: 'unplaceable'; reason: string };

export interface PlaceInput {
  nodes: NodeRecord[];
  profile: Profile;
  /** GPU indices already held on each node by other replicas' shards */
  heldGpus: Record<string, number[]>;
  exclude?: string[];
  /** Model name, only for messages (`<model>/<profile>`). */
  model?: string;
}

type Held = Record<string, number[]>;
const freeGpus = (n: NodeRecord, held: Held): number => freeCount(n.inventory, held[n.id] ?? []);

/** Past this many nodes, a refusal groups the nodes by reason instead of naming each (10,000 names is no message). */
const NAMED_NODES = 20;

/** Why each node is unusable, one entry per node, or grouped by reason (with a few names each) in a large cluster. */
function reasonsOf(nodes: readonly NodeRecord[], why: Map<string, string | null>): string {
  const blocked = nodes.filter((n) => why.get(n.id) !== null);
  if (blocked.length <= NAMED_NODES) return blocked.map((n) => `${n.id}: ${why.get(n.id)}`).join('; ');
  return [...groupBy(blocked, (n) => why.get(n.id) as string)]
    .sort((a, b) => b[1].length - a[1].length)
    .map(
      ([r, of]) =>
        `${of.length} node${of.length === 1 ? '' : 's'} ${r} (${of
          .slice(0, 3)
          .map((n) => n.id)
          .join(', ')}${of.length > 3 ? ', …' : ''})`,
    )
    .join('; ');
}

/** The indices each placed node gives its rank: the best-linked free set (lib/gpus.ts). */
function gpusOf(nodes: NodeRecord[], p: Profile, held: Held): number[][] {
  return nodes.map(
    (n) => pickGpus(freeIndices(n.inventory, held[n.id] ?? []), p.gpusPerNode, n.inventory.gpuTopology) ?? [],
  );
}

/** Why a node cannot take a shard of `profile`, or null when it can; `free` is its free GPU count. */
function unusable(n: NodeRecord, p: Profile, free: number, exclude: Set<string>): string | null {
  if (exclude.has(n.id)) return 'excluded (its last shard failed there)';
  if (n.state !== 'ready') return n.state;
  if (!n.inventory.engines.includes(p.engine)) return `no engine ${p.engine}`;
  if (free < p.gpusPerNode) return `${Math.max(free, 0)} of ${p.gpusPerNode} GPUs free`;
  return null;
}

/** Most free GPUs first, then by id: each node's free count computed once per placement, not per comparison. */
const byCapacity =
  (free: Map<string, number>) =>
  (a: NodeRecord, b: NodeRecord): number =>
    (free.get(b.id) ?? 0) - (free.get(a.id) ?? 0) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** Places one replica of `profile`. Multi-node replicas stay inside one fabric; islands take single-node replicas only. */
export function place(input: PlaceInput): Placement {
  const { profile: p, heldGpus: used } = input;
  const exclude = new Set(input.exclude ?? []);
  const label = input.model ? `${input.model}/${p.name}` : p.name;
  const want = `${label} (${p.engine}, ${p.nodes > 1 ? `${p.nodes} nodes × ` : ''}${p.gpusPerNode} GPU${p.gpusPerNode === 1 ? '' : 's'}${p.nodes > 1 ? ' on one fabric' : ''})`;
  const lead = p.nodes <= 1 ? `no node can take ${want}` : `no placement for ${want}`;
  if (input.nodes.length === 0) return { kind: 'unplaceable', reason: `${lead}: no nodes registered` };
  const free = new Map<string, number>();
  const why = new Map<string, string | null>();
  for (const n of input.nodes) {
    const f = freeGpus(n, used);
    free.set(n.id, f);
    why.set(n.id, unusable(n, p, f, exclude));
  }

  if (p.nodes <= 1) {
    // Islands first: a node on a fabric is what a multi-node replica needs, and a single-node one taking it (the
    // local cluster's third start, with a fabric node briefly down) left the multi-node replica no pair.
    const island = (n: NodeRecord): number => (Object.keys(n.inventory.fabrics).length === 0 ? 0 : 1);
    const capacity = byCapacity(free);
    // One pass for the best, not a sort: the same order as sorting by island, then capacity, then id.
    let best: NodeRecord | undefined;
    for (const n of input.nodes)
      if (why.get(n.id) === null && (!best || (island(n) - island(best) || capacity(n, best)) < 0)) best = n;
    if (best) return { kind: 'placed', fabric: null, nodes: [best.id], gpus: gpusOf([best], p, used) };
    return { kind: 'unplaceable', reason: `${lead}: ${reasonsOf(input.nodes, why)}` };
  }

  const groups = fabricGroups(input.nodes);
  const options = groups
    // In a split name, a node whose SM is unknown may be on either side (even apart from another unknown one).
    .map((g) => ({
      ...g,
      usable: g.split && !g.smGuid ? [] : g.members.filter((n) => why.get(n.id) === null).sort(byCapacity(free)),
    }))
    .sort((a, b) => b.usable.length - a.usable.length || a.name.localeCompare(b.name) || a.key.localeCompare(b.key));
  const fit = options.find((o) => o.usable.length >= p.nodes);
  if (fit) {
    const chosen = fit.usable.slice(0, p.nodes);
    return { kind: 'placed', fabric: fit.name, nodes: chosen.map((n) => n.id), gpus: gpusOf(chosen, p, used) };
  }

  const blockedOf = (o: (typeof options)[number]): string[] => {
    const reasons = reasonsOf(o.members, why);
    return reasons ? [reasons] : [];
  };
  const parts: string[] = [];
  for (const name of [...new Set(options.map((o) => o.name))]) {
    const sides = options.filter((o) => o.name === name);
    const first = sides[0];
    if (sides.length === 1 && first) {
      const blocked = blockedOf(first);
      parts.push(
        `fabric ${name} has ${first.usable.length} of ${p.nodes} usable nodes${blocked.length ? ` (${blocked.join('; ')})` : ''}`,
      );
      continue;
    }
    const each = sides.map((o) => {
      if (!o.smGuid)
        return `SM unknown: ${o.members.map((n) => n.id).join(', ')} (not used: which side they are on is unknown; run their agents as root with infiniband-diags)`;
      const blocked = blockedOf(o);
      return `${o.smGuid ? `SM ${o.smGuid}` : 'SM unknown'}: ${o.members.map((n) => n.id).join(', ')} (${o.usable.length} of ${p.nodes} usable${blocked.length ? `; ${blocked.join('; ')}` : ''})`;
    });
    parts.push(
      `fabric ${name} is ${sides.length} fabrics under one name (its nodes see different subnet managers, and a replica never spans them): ${each.join('; ')}`,
    );
  }
  const islands = input.nodes.filter((n) => Object.keys(n.inventory.fabrics).length === 0).map((n) => n.id);
  if (islands.length)
    parts.push(
      `${islands.join(', ')} ${islands.length === 1 ? 'is an island' : 'are islands'} (no fabric): single-node replicas only`,
    );
  if (options.length === 0) parts.unshift('no node declares a fabric (start agents with --fabric NAME)');
  return { kind: 'unplaceable', reason: `${lead}: ${parts.join('; ')}` };
}

/** A placement of the first profile that fits, with that profile. */
export type ProfilePlacement =
  (Extract<Placement, { kind: 'placed' }> & { profile: Profile }) | Extract<Placement, { kind: 'unplaceable' }>;

/**
 * Tries a model's profiles in catalog order and places the first that fits. None fitting, the reason names every
 * profile and what it lacks (one profile: exactly that profile's reason).
 */
export function placeFirstFit(input: Omit<PlaceInput, 'profile'> & { profiles: readonly Profile[] }): ProfilePlacement {
  const reasons: string[] = [];
  for (const profile of input.profiles) {
    const r = place({ ...input, profile });
    if (r.kind === 'placed') return { ...r, profile };
    reasons.push(input.profiles.length === 1 ? r.reason : `[${profile.name}] ${r.reason}`);
  }
  if (reasons.length <= 1)
    return { kind: 'unplaceable', reason: reasons[0] ?? `${input.model ?? 'the model'} has no profile` };
  return {
    kind: 'unplaceable',
    reason: `none of the ${reasons.length} profiles of ${input.model ?? 'the model'} fits (tried in catalog order): ${reasons.join(' ')}`,
  };
}

/** A placed shard as the event log names it: `node:port`, and its GPUs when it holds any (`sim-a:22000 gpus 0,1`). */
export function shardText(s: { nodeId: string; port: number; gpus?: number[] }): string {
  return `${s.nodeId}:${s.port}${s.gpus?.length ? ` gpus ${s.gpus.join(',')}` : ''}`;
}

/** The `replica.starting` event of a placement: `placed [as PROFILE] on SHARDS [(fabric F)]`. */
export function placedText(
  placement: { shards: { nodeId: string; port: number; gpus?: number[] }[]; fabric: string | null },
  profileName: string,
  manyProfiles: boolean,
): string {
  return `placed${manyProfiles ? ` as ${profileName}` : ''} on ${placement.shards.map(shardText).join(', ')}${placement.fabric ? ` (fabric ${placement.fabric})` : ''}`;
}
