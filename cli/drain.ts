/** `llmgw ctl drain|cordon|uncordon NODE`: maintenance on one node. */
import { WorkflowFailedError, type Client } from '@temporalio/client';
import { QUEUES, searchAttributes, workflowIds } from '../lib/names';
import type { NodeId } from '../lib/types';
import { drainProgressQuery, type DrainInput, type DrainProgress, type DrainResult } from '../workflows/contracts/drain';
import { postControl, type ControlApi } from './control-api';

/** Cordons or uncordons a node through the control plane. */
export async function setCordon(api: ControlApi, nodeId: string, verb: 'cordon' | 'uncordon', out: (s: string) => void): Promise<void> {
  const body = await postControl<{ state?: string; changed?: boolean }>(api, `/v1/nodes/${encodeURIComponent(nodeId)}/${verb}`);
  out(`${nodeId}: ${body.state}${body.changed ? '' : ' (it already was)'}\n`);
}

/** One line per change of a drain's progress. */
export function formatDrainProgress(p: DrainProgress): string {
  const c = p.current;
  const now = c ? `; moving ${c.replicaId} → ${c.replacement ?? '(starting a replacement)'}${c.state ? ` ${c.state}` : ''}${c.reason ? ` — ${c.reason}` : ''}` : '';
  return `${p.nodeId}: ${p.phase}, moved ${p.moved} of ${p.total}${now}`;
}

/**
 * Starts `drain/<node>` (or joins the one running) and follows it until it ends. Ctrl-C only stops following:
 * the drain goes on in Temporal, and running the command again follows it again.
 */
export async function drain(client: Client, o: { nodeId: NodeId; timeoutS: number | null; wait: boolean; uiLink: string; out: (s: string) => void }): Promise<void> {
  const workflowId = workflowIds.drain(o.nodeId);
  const handle = await client.workflow.start('drainNode', {
    taskQueue: QUEUES.control, workflowId, args: [{ nodeId: o.nodeId, timeoutS: o.timeoutS } satisfies DrainInput],
    workflowIdConflictPolicy: 'USE_EXISTING', typedSearchAttributes: [{ key: searchAttributes.node, value: [o.nodeId] }],
  });
  o.out(`workflow ${workflowId}\n  ${o.uiLink}\n`);
  if (!o.wait) return;
  let last = '';
  let done = false;
  const result = handle.result().finally(() => void (done = true)) as Promise<DrainResult>;
  result.catch(() => undefined);
  while (!done) {
    const p = await handle.query(drainProgressQuery).catch(() => null);
    const line = p ? formatDrainProgress(p) : '';
    if (line && line !== last) o.out(`  ${line}\n`);
    last = line || last;
    await Promise.race([result.catch(() => undefined), new Promise((r) => setTimeout(r, 500))]);
  }
  try {
    const r = await result;
    o.out(`${o.nodeId}: drained, ${r.moved.length} replica${r.moved.length === 1 ? '' : 's'} moved (${r.moved.join(', ') || 'none there'}); it stays cordoned until llmgw ctl uncordon ${o.nodeId}\n`);
  } catch (err) {
    const cause = err instanceof WorkflowFailedError ? err.cause : undefined;
    throw new Error(cause?.message ?? (err as Error).message);
  }
}
