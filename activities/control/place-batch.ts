/**
 * Batched placement: every replica placing at once (a fleet's deploy, a node's loss) is placed under one hold of the
 * cluster-wide placement lock, up to PLACE_BATCH_MAX at a time, instead of one lock cycle each. A cycle reads every
 * node and every shard (the GPUs held): at 1,000 nodes and 5,000 shards that read, not the placement function, is
 * what a placement costs, and one replica at a time made a deploy of N replicas read them N times.
 */
import { ApplicationFailure } from '@temporalio/common';
import { nodeDoorEndpoint } from '../../lib/node-door';
import { placeFirstFit } from '../../lib/placement';
import type { Store } from '../../lib/store/store';
import type { NodeRecord } from '../../lib/types';
import type { PlaceInput, PlaceResult, ShardPlan } from './index';

/** Most replicas placed under one hold of the lock (a batch of 100 on 1,000 nodes holds it well under a second). */
export const PLACE_BATCH_MAX = 100;

/** The MySQL named lock every placement holds (across control planes). */
export const PLACEMENT_LOCK = 'llmgw_place';

/** What a batch needs: the store, the engine port range, a log. */
export interface PlaceBatchDeps {
  store: Store;
  enginePorts: { base: number; count: number };
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** One replica's outcome in a batch: its placement, or the error that replica alone met (e.g. no free ports). */
export type BatchOutcome = { ok: true; result: PlaceResult } | { ok: false; error: Error };

/** Places one replica on the nodes as read, with `held` the GPUs taken so far (updated with this one's). */
async function placeOne(
  deps: PlaceBatchDeps,
  nodes: NodeRecord[],
  held: Record<string, number[]>,
  input: PlaceInput,
): Promise<PlaceResult> {
  const { store, enginePorts } = deps;
  const placement = placeFirstFit({
    nodes,
    model: input.model,
    profiles: input.profiles ?? [input.profile],
    heldGpus: held,
    exclude: input.exclude,
  });
  if (placement.kind === 'unplaceable') return placement;
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const shards: ShardPlan[] = [];
  let distPort = 0;
  for (const [rank, nodeId] of placement.nodes.entries()) {
    const host = byId.get(nodeId)?.inventory.host ?? '127.0.0.1';
    const want = rank === 0 && placement.nodes.length > 1 ? 2 : 1;
    const ports = await store.leasePorts(host, input.replicaId, want, enginePorts);
    if (want === 2) distPort = ports[1] ?? 0;
    shards.push({ rank, nodeId, host, port: ports[0] ?? 0, gpus: placement.gpus[rank] ?? [] });
  }
  // The batch released every replica's earlier shards first: nothing to replace.
  await store.addShards(
    input.replicaId,
    shards.map((s) => ({
      replicaId: input.replicaId,
      rank: s.rank,
      nodeId: s.nodeId,
      port: s.port,
      gpus: s.gpus ?? [],
    })),
  );
  // The next replica of the batch sees these GPUs taken, as it would have seen them in MySQL.
  for (const s of shards) held[s.nodeId] = [...(held[s.nodeId] ?? []), ...(s.gpus ?? [])];
  const head = shards[0];
  if (!head) throw ApplicationFailure.nonRetryable('placement returned no nodes', 'PlacementEmpty');
  // Behind the node's door when its agent serves one (engines then listen on loopback only).
  const door = byId.get(head.nodeId)?.inventory.door;
  deps.log?.('replica placed', {
    replica: input.replicaId,
    profile: placement.profile.name,
    nodes: placement.nodes,
    gpus: placement.gpus,
    fabric: placement.fabric,
  });
  return {
    kind: 'placed',
    fabric: placement.fabric,
    shards,
    endpoint: door
      ? nodeDoorEndpoint(head.host, door.port, head.nodeId, input.replicaId)
      : `http://${head.host}:${head.port}`,
    distHost: head.host,
    distPort,
    profile: placement.profile,
  };
}

/**
 * Places `inputs` (at most PLACE_BATCH_MAX) in order under one hold of the placement lock: each replica's earlier
 * placement is released, the nodes and held GPUs are read once, and each replica is placed with the GPUs of those
 * before it taken. One replica's error (its ports, a database error) is its own; the others still place.
 */
export async function placeBatch(deps: PlaceBatchDeps, inputs: PlaceInput[]): Promise<BatchOutcome[]> {
  if (inputs.length > PLACE_BATCH_MAX)
    throw new Error(`placeBatch: ${inputs.length} replicas, at most ${PLACE_BATCH_MAX} per batch`);
  const { store } = deps;
  return store.withLock(PLACEMENT_LOCK, 30, async () => {
    const ids = inputs.map((i) => i.replicaId);
    await store.releaseReplicas(ids);
    const nodes = await store.listNodes();
    const held = await store.heldGpus(ids);
    const out: BatchOutcome[] = [];
    for (const input of inputs)
      out.push(
        await placeOne(deps, nodes, held, input).then(
          (result): BatchOutcome => ({ ok: true, result }),
          (error: Error): BatchOutcome => ({ ok: false, error }),
        ),
      );
    if (inputs.length > 1) deps.log?.('placement batch', { replicas: inputs.length });
    return out;
  });
}

/**
 * A placer for the placeReplica activity: calls that arrive while a batch holds the lock wait and go together in the
 * next one (up to PLACE_BATCH_MAX). No call waits for company: a lone placement starts at once, as before.
 */
export function placementBatcher(deps: PlaceBatchDeps): (input: PlaceInput) => Promise<PlaceResult> {
  const waiting: { input: PlaceInput; resolve: (r: PlaceResult) => void; reject: (e: Error) => void }[] = [];
  let running = false;
  const run = async (): Promise<void> => {
    running = true;
    try {
      while (waiting.length > 0) {
        const batch = waiting.splice(0, PLACE_BATCH_MAX);
        // Two calls for one replica in a batch (an activity retried while its first attempt waits): the last wins,
        // as it would have placed last one at a time.
        const last = new Map(batch.map((b, i) => [b.input.replicaId, i]));
        const unique = batch.filter((b, i) => last.get(b.input.replicaId) === i);
        try {
          const outcomes = await placeBatch(
            deps,
            unique.map((b) => b.input),
          );
          for (const [i, b] of unique.entries()) {
            const o = outcomes[i] as BatchOutcome;
            if (o.ok) b.resolve(o.result);
            else b.reject(o.error);
          }
          const superseded = new Error('placement superseded by a later attempt for the same replica');
          for (const b of batch) if (!unique.includes(b)) b.reject(superseded);
        } catch (err) {
          for (const b of batch) b.reject(err as Error);
        }
      }
    } finally {
      running = false;
    }
  };
  return (input) =>
    new Promise<PlaceResult>((resolve, reject) => {
      waiting.push({ input, resolve, reject });
      if (!running) void run();
    });
}
