/** `llmgw ctl cordon|uncordon NODE`: whether NODE takes new replicas (those on it keep running either way). */
import type { CordonAnswer } from '../../gateway/control/contract';
import { postControl, type ControlApi } from '../control-api';
import { nodeArg, type CtlVerb } from './verb';
import { END_DRAIN_TIMEOUT_MS, endedDrainText } from './views/drain';

/** Cordons or uncordons a node through the control plane; an uncordon ends a running drain of the node first. */
export async function setCordon(
  api: ControlApi,
  nodeId: string,
  verb: 'cordon' | 'uncordon',
  out: (s: string) => void,
): Promise<void> {
  const body = await postControl<CordonAnswer>(
    api,
    `/v1/nodes/${encodeURIComponent(nodeId)}/${verb}`,
    undefined,
    END_DRAIN_TIMEOUT_MS,
  );
  if (body.drainEnded) out(`${endedDrainText(nodeId, body.drainEnded)}\n`);
  out(`${nodeId}: ${body.state}${body.changed ? '' : ' (it already was)'}\n`);
}

/** `ctl cordon` */
export const cordon: CtlVerb = {
  help: '  cordon NODE                 NODE takes no new replicas (those on it keep running)',
  run: (ctx) => setCordon(ctx.api, nodeArg(ctx), 'cordon', ctx.out),
};

/** `ctl uncordon` */
export const uncordon: CtlVerb = {
  help: '  uncordon NODE               NODE takes replicas again; a running drain of NODE ends first',
  run: (ctx) => setCordon(ctx.api, nodeArg(ctx), 'uncordon', ctx.out),
};
