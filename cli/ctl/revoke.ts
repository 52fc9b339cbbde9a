/** `llmgw ctl revoke NODE`: marks every certificate of NODE revoked; the control plane refuses them at once. */
import { postControl, type ControlApi } from '../control-api';
import { nodeArg, type CtlVerb } from './verb';

/** Revokes NODE's certificates through the control plane, which also closes the node's open connections. */
export async function revokeNode(
  api: ControlApi,
  nodeId: string,
  reason: string | undefined,
  out: (s: string) => void,
): Promise<void> {
  const r = await postControl<{ revoked: number }>(
    api,
    `/v1/nodes/${encodeURIComponent(nodeId)}/revoke`,
    reason === undefined ? {} : { reason },
  );
  out(
    r.revoked === 0
      ? `${nodeId}: no unrevoked certificate (already revoked, or never issued)\n`
      : `${nodeId}: ${r.revoked} certificate${r.revoked === 1 ? '' : 's'} revoked; its connections are closed and it cannot register again until it is onboarded anew\n`,
  );
}

/** `ctl revoke` */
export const revoke: CtlVerb = {
  help: `  revoke NODE [--reason TEXT] revoke every certificate of NODE: the control plane refuses it at once, open
                              connections included, and it cannot register again (docs/identity.md)`,
  run: (ctx) => revokeNode(ctx.api, nodeArg(ctx), ctx.values.reason, ctx.out),
};
