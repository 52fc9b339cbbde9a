/** Activities on the llmgw-control queue: the only workflow code that touches MySQL. All idempotent. */
import { doorGet, type DoorAgent } from '../../lib/door-agent';
import { parseDoorEndpoint } from '../../lib/node-door';
import { placedText } from '../../lib/placement';
import { heartbeat, sleep } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { Store } from '../../lib/store/store';
import { workflowIds } from '../../lib/names';
import {
  parseNodeId,
  type EngineStatus,
  type ModelSpec,
  type NodeId,
  type Profile,
  type ReplicaId,
  type ReplicaState,
} from '../../lib/types';
import { agentRestartedSignal, nodeLostSignal, nodesChangedSignal } from '../../workflows/contracts/replica';
import { createDrainWaitActivities } from './drain-wait';
import { createMoveActivities } from './moves';
import { createRemovalActivities } from './removal';
import { placementBatcher } from './place-batch';
import { createRetireActivities } from './retire';

export interface ControlDeps {
  store: Store;
  /** For reading workflow state (the deployment's replacements) while a drain waits. */
  client?: Client;
  enginePorts: { base: number; count: number };
  /** server.yaml drain.graceS: how long a stopping replica waits for its requests in flight (default 600) */
  drainGraceS?: number;
  /** server.yaml gateway.refreshMs (default 500) */
  gatewayRefreshMs?: number;
  /**
   * The gateway certificate's pool to the nodes' doors (server.yaml tls.gatewayCert): a replica behind a door is
   * asked for its /health through it. Absent: such a replica never reads as serving (and its wait says why).
   */
  doorAgent?: () => DoorAgent | null;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** One shard of a placed replica, with everything its node needs to launch it. */
export interface ShardPlan {
  rank: number;
  nodeId: NodeId;
  host: string;
  port: number;
  /** GPU indices on its node (its CUDA_VISIBLE_DEVICES); absent in placements recorded before GPU pinning */
  gpus?: number[];
}

export type PlaceResult =
  /** `profile`: the one placed (absent in results recorded before profiles were tried in turn: the input's) */
  | {
      kind: 'placed';
      fabric: string | null;
      shards: ShardPlan[];
      endpoint: string;
      distHost: string;
      distPort: number;
      profile?: Profile;
    }
  | { kind: 'unplaceable'; reason: string };

export interface PlaceInput {
  replicaId: string;
  model: string;
  profile: Profile;
  /** every profile of the model in catalog order: the first that fits is placed (default: `profile` alone) */
  profiles?: Profile[];
  /** nodes not to use (e.g. the one whose shard just timed out) */
  exclude: string[];
  /**
   * The replica's states around this placement, recorded here rather than by setReplicaState activities of their
   * own (two Temporal activities less per placement: issue 24): `before` (placing, rebuilding) as it starts, and once
   * placed `starting` with the `placed on …` event. Absent (histories before RECORDS_IN_ACTIVITIES_PATCH): neither.
   */
  record?: { before: { state: ReplicaState; reason: string | null } | null; profile: string };
}

/** waitServing's input: rank 0's endpoint, and the ready record it writes itself once the engine serves. */
export interface ServingInput {
  endpoint: string;
  intervalMs?: number;
  /**
   * Mark the replica ready here once it serves (one Temporal activity less per replica start: issue 24), only if it
   * is still `starting` on this placement (Store.markReady). Absent (older histories): the workflow records it.
   */
  ready?: { replicaId: string; model: string; rank0: { nodeId: NodeId; port: number } };
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

/** Signals every waiting replica to try placement again now, rather than at its next retry (a node came or changed). */
export async function wakeWaitingReplicas(store: Store, client: Client): Promise<void> {
  for (const id of await store.replicaIdsIn('waiting')) {
    await client.workflow
      .getHandle(workflowIds.replica(id))
      .signal(nodesChangedSignal)
      .catch(() => undefined);
  }
}

/** The replicas with a shard placed on `nodeId`. */
async function replicasOn(store: Store, nodeId: string): Promise<string[]> {
  return [...new Set((await store.listShards()).filter((s) => s.nodeId === nodeId).map((s) => s.replicaId))];
}

/** Tells every replica with a shard on `nodeId` that the node is gone, so it rebuilds elsewhere now. */
export async function signalNodeLost(store: Store, client: Client, nodeId: string, why: string): Promise<string[]> {
  const replicas = await replicasOn(store, nodeId);
  for (const id of replicas)
    await client.workflow
      .getHandle(workflowIds.replica(id))
      .signal(nodeLostSignal, { nodeId, why })
      .catch(() => undefined);
  return replicas;
}

/** Tells every replica with a shard on `nodeId` that its agent crashed and a new one runs: the shards run again, to be adopted. */
export async function signalAgentRestarted(store: Store, client: Client, nodeId: string): Promise<string[]> {
  const replicas = await replicasOn(store, nodeId);
  for (const id of replicas)
    await client.workflow
      .getHandle(workflowIds.replica(id))
      .signal(agentRestartedSignal, { nodeId })
      .catch(() => undefined);
  return replicas;
}

/** How long waitServing polls an engine every 200 ms before it slows to once a second. */
const SERVING_FAST_MS = 5000;

/** Builds the control activities over an injected store. */
export function createControlActivities(deps: ControlDeps) {
  const { store, enginePorts } = deps;
  const log = deps.log ?? ((): void => undefined);
  const place = placementBatcher({ store, enginePorts, log });

  return {
    /** The catalog entry of a model with its desired replica count, or null when it is not in the catalog. */
    async loadModel(name: string): Promise<ModelSpec | null> {
      return store.getModel(name);
    },

    /** Sets a model's desired replica count (scale). */
    async setDesiredReplicas(input: { model: string; replicas: number }): Promise<void> {
      await store.setDesiredReplicas(input.model, input.replicas);
      await store.event({
        kind: 'model.scaled',
        model: input.model,
        message: `desired replicas set to ${input.replicas}`,
      });
    },

    /**
     * Places a replica: releases any earlier placement, runs the pure placement function over the current nodes
     * (the model's profiles in catalog order, the first that fits), leases ports and records the shards with their
     * GPU indices. Serialised cluster-wide by a MySQL lock so two replicas placing at once never take the same GPU;
     * the replicas placing at once in this process share one hold of it (place-batch.ts).
     */
    async placeReplica(input: PlaceInput): Promise<PlaceResult> {
      const rec = input.record;
      if (!rec) return place(input);
      const base = { id: input.replicaId, model: input.model, profile: rec.profile };
      if (rec.before) await store.setReplica({ ...base, ...rec.before });
      const placed = await place(input);
      if (placed.kind !== 'placed') return placed;
      const profile = placed.profile?.name ?? input.profile.name;
      await store.setReplica({ ...base, profile, state: 'starting', reason: null, endpoint: null });
      await store.event({
        kind: 'replica.starting',
        model: input.model,
        replicaId: input.replicaId,
        message: placedText(placed, profile, (input.profiles?.length ?? 0) > 1),
      });
      return placed;
    },

    /** Records a replica's state (and routability: only `ready` with an endpoint is routed). */
    async setReplicaState(input: ReplicaStateInput): Promise<void> {
      await store.setReplica({
        id: input.replicaId,
        model: input.model,
        profile: input.profile,
        state: input.state,
        reason: input.reason ?? null,
        endpoint: input.endpoint,
      });
      if (input.event)
        await store.event({
          kind: `replica.${input.state}`,
          model: input.model,
          replicaId: input.replicaId,
          message: input.event,
        });
    },

    /**
     * Polls rank 0's /health until it answers 200; heartbeats what it last saw. Every 200 ms for the first
     * SERVING_FAST_MS (a sim or small engine is up in under a second; a rebuild is not made to wait), then every
     * second (an engine loading weights for minutes, thousands of them in a large deploy).
     */
    async waitServing(input: ServingInput): Promise<{ ready: boolean }> {
      const since = Date.now();
      let last = 'no answer yet';
      const door = parseDoorEndpoint(input.endpoint);
      const doorAgent = door ? deps.doorAgent?.() : null;
      for (;;) {
        try {
          let res: { status: number; body: string };
          if (!door) {
            const r = await fetch(`${input.endpoint}/health`, { signal: AbortSignal.timeout(2000) });
            res = { status: r.status, body: await r.text() };
          } else if (doorAgent) res = await doorGet(doorAgent, door, '/health', 2000);
          else
            throw new Error(
              `the replica is behind node ${door.node}'s door and this control plane has no gateway certificate to ask it with (server.yaml tls.gatewayCert: llmgw ca issue --gateway NAME)`,
            );
          if (res.status === 200) {
            if (!input.ready) return { ready: false };
            const { replicaId, model, rank0 } = input.ready;
            const ready = await store.markReady({ id: replicaId, model, endpoint: input.endpoint, rank0 });
            if (ready)
              await store.event({ kind: 'replica.ready', model, replicaId, message: `serving at ${input.endpoint}` });
            return { ready };
          }
          last = `health ${res.status}: ${res.body.slice(0, 200)}`;
        } catch (err) {
          last = `health check failed: ${(err as Error).message}`;
        }
        heartbeat(last);
        await sleep(input.intervalMs ?? (Date.now() - since < SERVING_FAST_MS ? 200 : 1000));
      }
    },

    /** A replica's recorded state, or null when it has no row. */
    async replicaState(replicaId: string): Promise<ReplicaState | null> {
      return store.replicaState(replicaId);
    },

    /** Cordons a node: it takes no new shards (the state survives restarts: registration keeps it). */
    async cordonNode(input: { nodeId: NodeId; why: string }): Promise<void> {
      const state = await store.nodeState(input.nodeId);
      if (state === null) {
        throw ApplicationFailure.nonRetryable(
          `node ${input.nodeId} is not registered: check the id with llmgw ctl nodes`,
          'LLMGW_UNKNOWN_NODE',
        );
      }
      if (!(await store.isCordoned(input.nodeId))) {
        await store.setNodeState(input.nodeId, 'cordoned');
        await store.event({ kind: 'node.cordoned', nodeId: input.nodeId, message: input.why });
      }
    },

    /** Replicas (not stopped) with a shard on the node, by id: what a drain must move. */
    async replicasOnNode(nodeId: string): Promise<{ replicaId: ReplicaId; model: string }[]> {
      return (await store.listReplicas())
        .filter((r) => r.state !== 'stopped' && r.shards.some((s) => s.nodeId === nodeId))
        .map((r) => ({ replicaId: r.id, model: r.model }));
    },

    /**
     * False only when the control plane holds the node down — its judgement from every signal it has (the node
     * liveness service: agent heartbeats, the door, its engines' ports). A shard that stopped heartbeating to
     * Temporal while its node is not down lost Temporal or its worker, not its engine: it is run again to adopt it.
     */
    async agentAlive(input: { nodeId: string }): Promise<boolean> {
      const state = await store.nodeState(parseNodeId(input.nodeId));
      return state !== null && state !== 'down';
    },

    /**
     * Records a node's engine probe (ensureEngines): each engine's status and what the node now offers; when
     * that changed, waiting replicas try placement again (a node that now offers their engine may take them).
     */
    async recordEngines(input: { nodeId: string; statuses: EngineStatus[]; configHash: string }): Promise<void> {
      const nodeId = parseNodeId(input.nodeId);
      const before = await store.node(nodeId);
      if (!(await store.recordEngines(nodeId, input.statuses, input.configHash))) return;
      const text = (s: EngineStatus): string => `${s.engine} ${s.version || '?'} ${s.state}`;
      await store.event({
        kind: 'node.engines',
        nodeId: input.nodeId,
        message:
          input.statuses.map((s) => `${text(s)}${s.reason ? `: ${s.reason.split('\n')[0]}` : ''}`).join('; ') ||
          'no engines named',
      });
      const offered = input.statuses
        .filter((s) => s.state === 'offered')
        .map((s) => s.engine)
        .sort()
        .join(',');
      if (deps.client && offered !== [...(before?.inventory.engines ?? [])].sort().join(','))
        await wakeWaitingReplicas(store, deps.client);
    },

    /** Forgets a replica's shards and ports. */
    async releaseReplica(replicaId: string): Promise<void> {
      await store.releaseReplica(replicaId);
    },

    ...createDrainWaitActivities(deps),
    ...createMoveActivities(deps),
    ...createRetireActivities(deps),
    ...createRemovalActivities(deps),
  };
}

export type ControlActivities = ReturnType<typeof createControlActivities>;
