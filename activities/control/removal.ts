/** What removing a node needs on llmgw-control: whether its replicas can go elsewhere, and forgetting it. */
import type { Client } from '@temporalio/client';
import { workflowIds } from '../../lib/names';
import { removalBlockers, type RemovalBlocker } from '../../lib/removal';
import { forgetNodeRows } from '../../lib/store/node-removal';
import type { Store } from '../../lib/store/store';
import type { StepResult } from '../../workflows/contracts/onboard';

/** What the node holds and whether a drain can move it all. */
export interface RemovalCheck extends StepResult {
  registered: boolean;
  replicas: string[];
  blockers: RemovalBlocker[];
}

/** Builds the removal activities. */
export function createRemovalActivities(deps: { store: Store; client?: Client }) {
  const { store } = deps;
  return {
    /** The node's replicas, and those a drain could not move (each fits nowhere else, its model named). */
    async removalCheck(input: { nodeId: string }): Promise<RemovalCheck> {
      const [nodes, replicas, models, heldGpus] = await Promise.all([
        store.listNodes(),
        store.listReplicas(),
        store.listModels(),
        store.heldGpus(),
      ]);
      const registered = nodes.some((n) => n.id === input.nodeId);
      const on = replicas
        .filter((r) => r.state !== 'stopped' && r.shards.some((s) => s.nodeId === input.nodeId))
        .map((r) => r.id);
      const blockers = removalBlockers(input.nodeId, { nodes, replicas, models, heldGpus });
      const summary = !registered
        ? 'not registered: nothing to drain'
        : on.length === 0
          ? 'holds no replica'
          : `holds ${on.join(', ')}${blockers.length ? `; ${blockers.map((b) => b.replicaId).join(', ')} fit${blockers.length === 1 ? 's' : ''} nowhere else` : ': each fits elsewhere'}`;
      return { registered, replicas: on, blockers, summary, waitedMs: 0, changed: false };
    },

    /** Deletes the node's rows and ends its engine workflow; the event log keeps its history. */
    async forgetNode(input: { nodeId: string }): Promise<StepResult> {
      await deps.client?.workflow
        .getHandle(workflowIds.engines(input.nodeId))
        .terminate('node removed')
        .catch(() => undefined);
      const counts = await forgetNodeRows(store.pool, input.nodeId);
      await store.event({
        kind: 'node.removed',
        nodeId: input.nodeId,
        message: `removed: ${Object.entries(counts)
          .map(([t, n]) => `${n} ${t}`)
          .join(', ')} deleted`,
      });
      return {
        summary: `forgot ${counts.host_keys} host key${counts.host_keys === 1 ? '' : 's'}, the node's record${counts.nodes ? '' : ' (already gone)'}, ${counts.weight_copies} weights cop${counts.weight_copies === 1 ? 'y' : 'ies'}`,
        waitedMs: 0,
        changed: (counts.nodes ?? 0) + (counts.host_keys ?? 0) > 0,
      };
    },
  };
}
