/** `llmgw ctl drain NODE`: cordon NODE and move its replicas elsewhere, each replacement serving before its original stops. */
import type { Client } from '@temporalio/client';
import type { DrainCancelAnswer } from '../../gateway/control/contract';
import { workflowIds } from '../../lib/names';
import { startDrain } from '../../lib/workflow-starts';
import { checkNodeId } from '../../lib/pki/node-id';
import type { NodeId } from '../../lib/types';
import {
  allowDowntimeSignal,
  downtimeText,
  drainProgressQuery,
  formatDrainProgress,
  type DrainInput,
  type DrainResult,
} from '../../workflows/contracts/drain';
import { intOption } from '../args';
import { postControl, type ControlApi } from '../control-api';
import { temporalClient, temporalSdk, workflowLink } from '../temporal';
import { getJson, nodeArg, type CtlVerb } from './verb';
import { END_DRAIN_TIMEOUT_MS, endedDrainText, stillCordoned } from './views/drain';

/**
 * Starts `drain/<node>` (or joins the one running) and follows it until it ends. Ctrl-C only stops following:
 * the drain goes on in Temporal, and running the command again follows it again. `allowDowntime` also reaches a
 * drain that was already running.
 */
export async function drain(
  client: Client,
  o: {
    nodeId: NodeId;
    timeoutS: number | null;
    allowDowntime: boolean;
    wait: boolean;
    uiLink: string;
    out: (s: string) => void;
  },
): Promise<void> {
  const workflowId = workflowIds.drain(o.nodeId);
  const input: DrainInput = {
    nodeId: o.nodeId,
    timeoutS: o.timeoutS,
    ...(o.allowDowntime ? { allowDowntime: true } : {}),
  };
  const handle = await startDrain(client, input);
  if (o.allowDowntime) await handle.signal(allowDowntimeSignal);
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
    o.out(
      `${o.nodeId}: drained, ${r.moved.length} replica${r.moved.length === 1 ? '' : 's'} moved (${r.moved.join(', ') || 'none there'})${downtimeText(r.downtime)}; it stays cordoned until llmgw ctl uncordon ${o.nodeId}\n`,
    );
  } catch (err) {
    const cause = err instanceof temporalSdk().WorkflowFailedError ? err.cause : undefined;
    throw new Error(cause?.message ?? (err as Error).message);
  }
}

/** Ends a running drain of the node through the control plane (its move in progress is given back). */
export async function cancelDrain(api: ControlApi, nodeId: string, out: (s: string) => void): Promise<void> {
  const body = await postControl<DrainCancelAnswer>(
    api,
    `/v1/nodes/${encodeURIComponent(nodeId)}/drain/cancel`,
    undefined,
    END_DRAIN_TIMEOUT_MS,
  );
  out(
    body.drain
      ? `${endedDrainText(nodeId, body.drain)}\n${stillCordoned(nodeId)}\n`
      : `no drain of ${nodeId} is running\n`,
  );
}

/** `ctl drain` */
export const drainVerb: CtlVerb = {
  help: `  drain NODE [--timeout S] [--allow-downtime] [--no-wait]
                              cordon NODE and move its replicas elsewhere, one at a time, each replacement
                              serving before its original stops (workflow drain/NODE; running it again joins it);
                              --allow-downtime: a replica that fits nowhere else while it runs moves stop-first
  drain NODE --cancel         end a running drain of NODE: the move in progress is given back (NODE stays cordoned)`,
  async run(ctx) {
    const nodeId = checkNodeId(nodeArg(ctx));
    const { values, config, out } = ctx;
    if (values.cancel) return cancelDrain(ctx.api, nodeId, out);
    // As cordon does: an unknown node is refused before a workflow starts (the control plane's 404 says so).
    await getJson(ctx.api, `${ctx.api.server}/v1/nodes/${nodeId}`);
    const timeoutS = values.timeout === undefined ? null : intOption(values.timeout, '--timeout', 1);
    const { client, close } = await temporalClient(config);
    try {
      await drain(client, {
        nodeId,
        timeoutS,
        allowDowntime: values['allow-downtime'] ?? false,
        wait: !values['no-wait'],
        uiLink: workflowLink(config, workflowIds.drain(nodeId)),
        out,
      });
    } finally {
      await close();
    }
  },
};
