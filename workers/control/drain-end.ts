/** Ending a running drain: what `POST /v1/nodes/:id/drain/cancel` and an uncordon do, through Temporal. */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { EndedDrain } from '../../gateway/control/contract';
import { workflowIds } from '../../lib/names';
import { drainProgressQuery } from '../../workflows/contracts/drain';

/**
 * Cancels `drain/<node>` when it runs and waits (up to `timeoutMs`) until it has closed: the drain then gives its
 * move in progress back (the replacement stops if the original still serves). Null when no drain was running.
 */
export async function endDrain(client: Client, nodeId: string, timeoutMs = 30_000): Promise<EndedDrain | null> {
  const workflowId = workflowIds.drain(nodeId);
  const handle = client.workflow.getHandle(workflowId);
  const running = await handle.describe().then(
    (d) => d.status.name === 'RUNNING',
    (err: unknown) => {
      if (err instanceof WorkflowNotFoundError) return false;
      throw err;
    },
  );
  if (!running) return null;
  await handle.cancel();
  const closed = handle.result().then(
    () => true,
    () => true,
  );
  const ended = await Promise.race([closed, new Promise<false>((r) => setTimeout(() => r(false), timeoutMs).unref())]);
  const status = ended ? (await handle.describe()).status.name.toLowerCase() : 'running';
  // A closed workflow still answers queries (the control worker replays it): its note says what became of its move.
  const note = ended ? ((await handle.query(drainProgressQuery).catch(() => null))?.note ?? null) : null;
  return { workflowId, status, note };
}
