/** Activities on the llmgw-control queue: the only workflow code that touches MySQL. All idempotent. */
import { heartbeat, sleep } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Store } from '../../lib/store/store';
import { place } from '../../lib/placement';
import type { ModelSpec, NodeId, Profile, ReplicaState } from '../../lib/types';

export interface ControlDeps {
  store: Store;
  enginePorts: { base: number; count: number };
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** One shard of a placed replica, with everything its node needs to launch it. */
export interface ShardPlan {
  rank: number;
  nodeId: NodeId;
  host: string;
  port: number;
}

export type PlaceResult =
  | { kind: 'placed'; fabric: string | null; shards: ShardPlan[]; endpoint: string; distHost: string; distPort: number }
  | { kind: 'unplaceable'; reason: string };

export interface PlaceInput {
  replicaId: string;
  model: string;
  profile: Profile;
  /** nodes not to use (e.g. the one whose shard just timed out) */
  exclude: string[];
}

export interface ReplicaStateInput {
  replicaId: string;
  model: string;
  profile: string;
  state: ReplicaState;
  reason?: string | null;
  endpoint?: string | null;
  event?: string;
}

/** Builds the control activities over an injected store. */
export function createControlActivities(deps: ControlDeps) {
  const { store, enginePorts } = deps;
  const log = deps.log ?? ((): void => undefined);

  return {
    /** The catalog entry of a model with its desired replica count, or null when it is not in the catalog. */
    async loadModel(name: string): Promise<ModelSpec | null> {
      return store.getModel(name);
    },

    /** Sets a model's desired replica count (scale). */
    async setDesiredReplicas(input: { model: string; replicas: number }): Promise<void> {
      await store.setDesiredReplicas(input.model, input.replicas);
      await store.event({ kind: 'model.scaled', model: input.model, message: `desired replicas set to ${input.replicas}` });
    },

    /**
     * Places a replica: releases any earlier placement, runs the pure placement function over the
     * current nodes, leases ports and records the shards. Serialised cluster-wide by a MySQL lock so
     * two replicas placing at once never take the same GPU.
     */
    async placeReplica(input: PlaceInput): Promise<PlaceResult> {
      return store.withLock('llmgw_place', 30, async () => {
        await store.releaseReplica(input.replicaId);
        const nodes = await store.listNodes();
        const usedGpus = await store.usedGpus(input.replicaId);
        const placement = place({ nodes, model: input.model, profile: input.profile, usedGpus, exclude: input.exclude });
        if (placement.kind === 'unplaceable') return placement;
        const byId = new Map(nodes.map((n) => [n.id, n]));
        const shards: ShardPlan[] = [];
        let distPort = 0;
        for (const [rank, nodeId] of placement.nodes.entries()) {
          const host = byId.get(nodeId)?.inventory.host ?? '127.0.0.1';
          const want = rank === 0 && placement.nodes.length > 1 ? 2 : 1;
          const ports = await store.leasePorts(host, input.replicaId, want, enginePorts);
          if (want === 2) distPort = ports[1] ?? 0;
          shards.push({ rank, nodeId, host, port: ports[0] ?? 0 });
        }
        await store.setShards(
          input.replicaId,
          shards.map((s) => ({ replicaId: input.replicaId, rank: s.rank, nodeId: s.nodeId, port: s.port, gpus: input.profile.gpusPerNode })),
        );
        const head = shards[0];
        if (!head) throw ApplicationFailure.nonRetryable('placement returned no nodes', 'PlacementEmpty');
        log('replica placed', { replica: input.replicaId, nodes: placement.nodes, fabric: placement.fabric });
        return { kind: 'placed', fabric: placement.fabric, shards, endpoint: `http://${head.host}:${head.port}`, distHost: head.host, distPort };
      });
    },

    /** Records a replica's state (and routability: only `ready` with an endpoint is routed). */
    async setReplicaState(input: ReplicaStateInput): Promise<void> {
      await store.setReplica({ id: input.replicaId, model: input.model, profile: input.profile, state: input.state, reason: input.reason ?? null, endpoint: input.endpoint });
      if (input.event) await store.event({ kind: `replica.${input.state}`, model: input.model, replicaId: input.replicaId, message: input.event });
    },

    /** Polls rank 0's /health until it answers 200; heartbeats what it last saw. */
    async waitServing(input: { endpoint: string; intervalMs?: number }): Promise<void> {
      let last = 'no answer yet';
      for (;;) {
        try {
          const res = await fetch(`${input.endpoint}/health`, { signal: AbortSignal.timeout(2000) });
          const body = await res.text();
          if (res.status === 200) return;
          last = `health ${res.status}: ${body.slice(0, 200)}`;
        } catch (err) {
          last = `health check failed: ${(err as Error).message}`;
        }
        heartbeat(last);
        await sleep(input.intervalMs ?? 200);
      }
    },

    /** Forgets a replica's shards and ports. */
    async releaseReplica(replicaId: string): Promise<void> {
      await store.releaseReplica(replicaId);
    },
  };
}

export type ControlActivities = ReturnType<typeof createControlActivities>;
