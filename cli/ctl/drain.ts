/** `llmgw ctl drain NODE`: cordon NODE and move its replicas elsewhere, each replacement serving before its original stops. */
import { WorkflowFailedError, type Client } from '@temporalio/client';
import { QUEUES, searchAttributes, workflowIds } from '../../lib/names';
import { checkNodeId } from '../../lib/pki/node-id';
import type { NodeId } from '../../lib/types';
import { drainProgressQuery, type DrainInput, type DrainProgress, type DrainResult } from '../../workflows/contracts/drain';
import { intOption } from '../args';
import { temporalClient, workflowLink } from '../temporal';
import { nodeArg, type CtlVerb } from './verb';

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

/** `ctl drain` */
export const drainVerb: CtlVerb = {
  help: `  drain NODE [--timeout S] [--no-wait]
                              cordon NODE and move its replicas elsewhere, one at a time, each replacement
                              serving before its original stops (workflow drain/NODE; running it again joins it)`,
  async run(ctx) {
    const nodeId = checkNodeId(nodeArg(ctx));
    const { values, config, out } = ctx;
    const timeoutS = values.timeout === undefined ? null : intOption(values.timeout, '--timeout', 1);
    const { client, close } = await temporalClient(config);
    try {
      await drain(client, { nodeId, timeoutS, wait: !values['no-wait'], uiLink: workflowLink(config, workflowIds.drain(nodeId)), out });
    } finally {
      await close();
    }
  },
};
