/** What a drain asks while it moves one replica: how the move stands, whether stopping it first would help, its downtime. */
import { heartbeat, sleep } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { workflowIds } from '../../lib/names';
import { placeFirstFit, type Placement } from '../../lib/placement';
import { DrainStore } from '../../lib/store/drain';
import type { ReplicaId } from '../../lib/types';
import { moveKey, type MoveStatus } from '../../workflows/contracts/drain';
import { deploymentQuery } from '../../workflows/contracts/model';
import { inflightView, type DrainWaitDeps } from './drain-wait';

/** What the move activities need: the store and drain settings, and Temporal to read the deployment's replacements. */
export interface MoveDeps extends DrainWaitDeps {
  client?: Client;
}

/** Input of moveStatus. */
export interface MoveStatusInput {
  model: string;
  replicaId: string;
  nodeId: string;
  /** moveKey of the status last seen: the answer waits until it differs */
  seen: string | null;
  waitMs?: number;
  /** a stop-first move: once the original is gone, report on this replacement until it serves */
  replacement?: ReplicaId;
  /** the replacement last reported: still named once the deployment is done with it (it served; the original drains) */
  known?: ReplicaId | null;
}

/** Builds the move activities. */
export function createMoveActivities(deps: MoveDeps) {
  const { store } = deps;
  const drains = new DrainStore(store.pool);
  const replacementOf = async (model: string, replicaId: string): Promise<ReplicaId | null> => {
    if (!deps.client) return null;
    const dep = await deps.client.workflow
      .getHandle(workflowIds.model(model))
      .query(deploymentQuery)
      .catch(() => null);
    return dep?.replacing?.find((r) => r.old === replicaId)?.new ?? null;
  };

  /** One look at a move. */
  const look = async (input: MoveStatusInput): Promise<MoveStatus> => {
    const replicas = await store.listReplicas(input.model);
    const old = replicas.find((r) => r.id === input.replicaId);
    if (!old || old.state === 'stopped') {
      const rep = input.replacement ? replicas.find((r) => r.id === input.replacement) : undefined;
      if (!rep || rep.state === 'ready' || rep.state === 'stopped') return { kind: 'moved' };
      return {
        kind: 'moving',
        replacement: rep.id as ReplicaId,
        state: rep.state,
        reason: rep.reason,
        draining: null,
        originalGone: true,
      };
    }
    const replacement = input.replacement ?? (await replacementOf(input.model, input.replicaId)) ?? input.known ?? null;
    // Still running, but not here: a failure rebuilt it elsewhere before its replacement served.
    if (!old.shards.some((s) => s.nodeId === input.nodeId)) return { kind: 'moved', leftByItself: true, replacement };
    const row = replacement ? replicas.find((r) => r.id === replacement) : undefined;
    const v = old.state === 'stopping' ? await inflightView(deps, old.id, input.model) : null;
    const draining = v
      ? { inFlight: v.inFlight, gateways: v.gateways.length, graceLeftS: Math.round(v.graceLeftMs / 1000) }
      : null;
    return { kind: 'moving', replacement, state: row?.state ?? null, reason: row?.reason ?? null, draining };
  };

  return {
    /**
     * Waits (up to `waitMs`) for a replica to leave the node or for what the move reports to change (the
     * replacement's state, the original's requests in flight), so the drain's progress is fresh without a
     * workflow timer per second.
     */
    async moveStatus(input: MoveStatusInput): Promise<MoveStatus> {
      const deadline = Date.now() + (input.waitMs ?? 20_000);
      for (;;) {
        const status = await look(input);
        if (status.kind === 'moved' || moveKey(status) !== input.seen || Date.now() > deadline) return status;
        heartbeat(status);
        await sleep(500);
      }
    },

    /**
     * Whether the replacement could be placed if the original (and the replacement's own lease) were gone: what a
     * stop-first move (--allow-downtime) would achieve. The drained node is cordoned, so it never counts.
     */
    async stopFirstCheck(input: { model: string; original: string; replacement: string }): Promise<Placement> {
      const spec = await store.getModel(input.model);
      if (!spec?.profiles.length) return { kind: 'unplaceable', reason: `model ${input.model} is not in the catalog` };
      const heldGpus = await store.heldGpus([input.original, input.replacement]);
      return placeFirstFit({ nodes: await store.listNodes(), profiles: spec.profiles, heldGpus, model: input.model });
    },

    /**
     * A stop-first move's downtime: from the original leaving routing (its `stopping` event, logged long before) to
     * its replacement serving (its ready row: its event may not be written yet), ms by MySQL's clock.
     */
    async moveDowntime(input: { original: string; replacement: string }): Promise<number | null> {
      const left = await drains.lastEventAt(input.original, 'replica.stopping');
      const back = await drains.readySince(input.replacement);
      return left && back ? Math.max(0, back.getTime() - left.getTime()) : null;
    },
  };
}
