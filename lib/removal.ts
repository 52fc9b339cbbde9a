/**
 * Whether a node can be removed without taking a model down: each replica on it must fit somewhere else (its
 * drain moves it make-before-break), every other node and those moves accounted for. Pure: ctl remove-node's
 * refusal, which names the model and what it lacks.
 */
import { placeFirstFit } from './placement';
import type { ModelSpec, NodeRecord, ReplicaRecord } from './types';

/** A replica the drain could not move: which, of which model, whether it is the model's last, and why. */
export interface RemovalBlocker {
  replicaId: string;
  model: string;
  /** no other replica of the model runs elsewhere: the model stops serving */
  last: boolean;
  reason: string;
}

/**
 * The replicas on `nodeId` that fit nowhere else, placing them one after the other as the drain would (each move
 * takes what it needs, so two replicas cannot both count on the one GPU left). Replicas whose model left the
 * catalog are not counted (nothing replaces them).
 */
export function removalBlockers(
  nodeId: string,
  o: { nodes: NodeRecord[]; replicas: ReplicaRecord[]; models: ModelSpec[]; heldGpus: Record<string, number[]> },
): RemovalBlocker[] {
  const held = Object.fromEntries(Object.entries(o.heldGpus).map(([n, g]) => [n, [...g]]));
  const nodes = o.nodes.filter((n) => n.id !== nodeId);
  const live = o.replicas.filter((r) => r.state !== 'stopped');
  const out: RemovalBlocker[] = [];
  for (const r of live.filter((x) => x.shards.some((s) => s.nodeId === nodeId))) {
    const model = o.models.find((m) => m.name === r.model);
    if (!model) continue;
    const p = placeFirstFit({ nodes, profiles: model.profiles, heldGpus: held, model: model.name });
    if (p.kind === 'placed') {
      p.nodes.forEach((n, i) => void (held[n] = [...(held[n] ?? []), ...(p.gpus[i] ?? [])]));
      continue;
    }
    const elsewhere = live.some(
      (x) => x.model === r.model && x.id !== r.id && !x.shards.some((s) => s.nodeId === nodeId),
    );
    out.push({ replicaId: r.id, model: r.model, last: !elsewhere, reason: p.reason });
  }
  return out;
}

/** The refusal: each replica that cannot move, the model it takes down (or leaves short), why, and what to do. */
export function removalRefusal(nodeId: string, blockers: RemovalBlocker[]): string {
  const each = blockers.map(
    (b) =>
      `${b.last ? `${nodeId} holds the last replica of ${b.model} (${b.replicaId})` : `${b.replicaId} of ${b.model} would not be replaced`}, and it fits nowhere else: ${b.reason}`,
  );
  const down = [...new Set(blockers.filter((b) => b.last).map((b) => b.model))];
  return `${each.join('; ')}. Add capacity, scale ${[...new Set(blockers.map((b) => b.model))].join(', ')} down, or remove ${nodeId} with --force${down.length ? ` (${down.join(', ')} then stop${down.length === 1 ? 's' : ''} serving until a node can take ${down.length === 1 ? 'it' : 'them'})` : ''}`;
}
