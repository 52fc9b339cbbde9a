/** After `ctl deploy` sees its replicas ready: wait until every live gateway routes them (GET /v1/models/:name/routing). */
import type { ModelRoutingAnswer } from '../../../gateway/control/contract';
import { UsageError } from '../../args';
import type { ControlApi } from '../../control-api';
import { getJson } from '../verb';

/** How often the control plane is asked while a gateway lags, ms: a gateway writes its report as it applies a push. */
const POLL_MS = 50;

/**
 * Returns once no live gateway misses one of the model's ready replicas (at once when no gateway reports: none
 * is live, or this control plane predates the route); fails after `timeoutMs` naming each lagging gateway.
 */
export async function followRouting(
  api: ControlApi,
  model: string,
  timeoutMs: number,
  out: (s: string) => void,
): Promise<void> {
  const t0 = Date.now();
  const path = `/v1/models/${encodeURIComponent(model)}/routing`;
  for (;;) {
    let answer: ModelRoutingAnswer;
    try {
      answer = await getJson<ModelRoutingAnswer>(api, path);
    } catch (err) {
      // A control plane older than this route answers 404: the deploy is done as far as it can tell.
      if (err instanceof UsageError && /404|not found/i.test(err.message)) {
        out(`${model}: this control plane cannot say what the gateways route (no ${path}); not waiting for them\n`);
        return;
      }
      throw err;
    }
    const lagging = answer.gateways.filter((g) => g.missing.length > 0);
    if (lagging.length === 0) {
      if (answer.gateways.length === 0) out(`${model}: no live gateway reports what it routes; not waiting for one\n`);
      else
        out(
          `${model}: routed by ${answer.gateways.length === 1 ? 'the' : `all ${answer.gateways.length}`} live gateway${answer.gateways.length === 1 ? '' : 's'} (${Date.now() - t0} ms after ready)\n`,
        );
      return;
    }
    if (Date.now() - t0 > timeoutMs) {
      const lines = lagging.map(
        (g) =>
          `  gateway ${g.gatewayId} (reported ${(g.ageMs / 1000).toFixed(1)} s ago) does not route ${g.missing.join(', ')}`,
      );
      throw new Error(
        `${model}: ${lagging.length} of ${answer.gateways.length} live gateways do not route its ready replicas ${timeoutMs / 1000} s after they became ready:\n${lines.join('\n')}\n` +
          `The replicas serve; those gateways' routing tables are behind. On each, look in its log for 'route push lost' or ` +
          `'routing table stale' and check that it reaches a control plane (gateway.controlPlanes, with its gateway certificate) ` +
          `and MySQL; GET /health/routes on it shows what it routes. It catches up on its own once it does (within gateway.refreshMs ` +
          `while it polls). --route-timeout S waits longer; --no-wait does not wait.`,
      );
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
