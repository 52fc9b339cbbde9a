/** `llmgw ctl revoke NODE`: marks every certificate of NODE revoked; the control plane refuses them at once. */
import type { RevokeAnswer } from '../../gateway/control/contract';
import { REVOCATION_REASON_MAX } from '../../lib/store/store';
import { postControl, type ControlApi } from '../control-api';
import { nodeArg, type CtlVerb } from './verb';

/**
 * Revokes NODE's certificates through the control plane, which also closes the node's open connections. A reason
 * longer than the store holds is recorded cut, and the revocation happens all the same.
 */
export async function revokeNode(
  api: ControlApi,
  nodeId: string,
  reason: string | undefined,
  out: (s: string) => void,
): Promise<void> {
  const r = await postControl<RevokeAnswer>(
    api,
    `/v1/nodes/${encodeURIComponent(nodeId)}/revoke`,
    reason === undefined ? {} : { reason },
  );
  out(
    r.revoked === 0
      ? `${nodeId}: no unrevoked certificate (already revoked, or never issued)\n`
      : `${nodeId}: ${r.revoked} certificate${r.revoked === 1 ? '' : 's'} revoked; its connections are closed and it cannot register again until it is onboarded anew\n`,
  );
  if (r.reasonCut)
    out(
      `  the reason was recorded cut to its first ${REVOCATION_REASON_MAX} characters (all the certificates table holds)\n`,
    );
}

/** `ctl revoke` */
export const revoke: CtlVerb = {
  help: `  revoke NODE [--reason TEXT] revoke every certificate of NODE: the control plane refuses it at once, open
                              connections included, and it cannot register again (docs/identity.md)`,
  run: (ctx) => revokeNode(ctx.api, nodeArg(ctx), ctx.values.reason, ctx.out),
};
