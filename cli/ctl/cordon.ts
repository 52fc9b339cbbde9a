/** `llmgw ctl cordon|uncordon NODE`: whether NODE takes new replicas (those on it keep running either way). */
import { postControl, type ControlApi } from '../control-api';
import { nodeArg, type CtlVerb } from './verb';

/** Cordons or uncordons a node through the control plane. */
export async function setCordon(api: ControlApi, nodeId: string, verb: 'cordon' | 'uncordon', out: (s: string) => void): Promise<void> {
  const body = await postControl<{ state?: string; changed?: boolean }>(api, `/v1/nodes/${encodeURIComponent(nodeId)}/${verb}`);
  out(`${nodeId}: ${body.state}${body.changed ? '' : ' (it already was)'}\n`);
}

/** `ctl cordon` */
export const cordon: CtlVerb = {
  help: '  cordon NODE                 NODE takes no new replicas (those on it keep running)',
  run: (ctx) => setCordon(ctx.api, nodeArg(ctx), 'cordon', ctx.out),
};

/** `ctl uncordon` */
export const uncordon: CtlVerb = {
  help: '  uncordon NODE               NODE takes replicas again',
  run: (ctx) => setCordon(ctx.api, nodeArg(ctx), 'uncordon', ctx.out),
};
