/** Forgetting a model removed from the catalog (ctl apply --prune), once its deployment has stopped every replica. */
import { heartbeat, sleep } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { workflowIds } from '../../lib/names';
import type { Store } from '../../lib/store/store';
import { stopSignal } from '../../workflows/contracts/replica';

/** Builds retireModel over the store (and Temporal, to stop replicas no deployment holds any more). */
export function createRetireActivities(deps: { store: Store; client?: Client }) {
  const { store } = deps;
  return {
    /**
     * Waits until no replica of `model` is left running (each one stopping drains its requests first, up to its
     * grace), heartbeating which ones it waits for; then deletes the model's row, so the gateway stops listing it.
     * A replica its deployment no longer lists (left over from an earlier one) is told to stop too.
     */
    async retireModel(input: { model: string }): Promise<{ waitedFor: string[] }> {
      const waitedFor = new Set<string>();
      for (;;) {
        const left = (await store.listReplicas(input.model)).filter((r) => r.state !== 'stopped');
        if (left.length === 0) break;
        for (const r of left.filter((x) => !waitedFor.has(x.id))) {
          waitedFor.add(r.id);
          await deps.client?.workflow
            .getHandle(workflowIds.replica(r.id))
            .signal(stopSignal)
            .catch(() => undefined);
        }
        heartbeat(`waiting for ${left.map((r) => `${r.id} (${r.state})`).join(', ')} to stop`);
        await sleep(1000);
      }
      await store.deleteModel(input.model);
      await store.event({
        kind: 'model.removed',
        model: input.model,
        message: `removed from the catalog: ${waitedFor.size ? `${[...waitedFor].join(', ')} stopped, ` : ''}model forgotten`,
      });
      return { waitedFor: [...waitedFor] };
    },
  };
}
