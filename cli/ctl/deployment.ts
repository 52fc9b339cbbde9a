/** What `ctl deploy` and `ctl scale` share: start or join `model/<m>`, apply a count, follow until it serves. */
import type { ServerConfig } from '../../config/types';
import { startModelDeployment } from '../../lib/workflow-starts';
import { workflowIds } from '../../lib/names';
import type { ReplicaRecord } from '../../lib/types';
import { scaleUpdate } from '../../workflows/contracts/model';
import { UsageError } from '../args';
import type { ControlApi } from '../control-api';
import { followRouting } from './views/routing-wait';
import { temporalClient, temporalSdk, workflowLink } from '../temporal';
import { catalogModel, getJson } from './verb';
import { formatFetch, weightsFetches } from './views/weights';

/** Starts or joins `model/<m>`, applies a scale, and follows the replicas until they all serve. */
export async function deployModel(
  config: ServerConfig,
  api: ControlApi,
  o: {
    model: string;
    replicas: number | undefined;
    wait: boolean;
    timeoutS: number;
    /** how long the gateways may take to route the ready replicas, s */
    routeTimeoutS: number;
    out: (s: string) => void;
  },
): Promise<void> {
  await catalogModel(api, o.model);
  const { client, close } = await temporalClient(config);
  try {
    const workflowId = workflowIds.model(o.model);
    const handle = await startModelDeployment(client, o.model);
    o.out(`workflow ${workflowId}\n  ${workflowLink(config, workflowId)}\n`);
    if (o.replicas !== undefined) {
      // A refused update carries the validator's own words ("from 0 to 64"), not just "Workflow Update failed".
      await handle.executeUpdate(scaleUpdate, { args: [o.replicas] }).catch((err: unknown) => {
        if (err instanceof temporalSdk().WorkflowUpdateFailedError)
          throw new UsageError(`${workflowId} refused the scale: ${err.cause?.message ?? err.message}`);
        throw err;
      });
      o.out(`desired replicas: ${o.replicas}\n`);
    }
    if (!o.wait) return;
    await followReplicas(api, o.model, o.timeoutS * 1000, o.out, () =>
      weightsFetches(client, { model: o.model }).then((fs) => fs.map((f) => formatFetch(f))),
    );
    await followRouting(api, o.model, o.routeTimeoutS * 1000, o.out);
  } finally {
    await close();
  }
}

/** Prints each replica's state as it changes until all desired replicas are ready; fails on timeout. */
async function followReplicas(
  api: ControlApi,
  model: string,
  timeoutMs: number,
  out: (s: string) => void,
  weights?: () => Promise<string[]>,
): Promise<void> {
  const seen = new Map<string, string>();
  let weightsAt = 0;
  const weightsSeen = new Set<string>();
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const [{ models }, { replicas }] = await Promise.all([
      getJson<{ models: { name: string; replicas: number }[] }>(api, `${api.server}/v1/models`),
      getJson<{ replicas: ReplicaRecord[] }>(api, `${api.server}/v1/replicas?model=${encodeURIComponent(model)}`),
    ]);
    const live = replicas.filter((r) => r.state !== 'stopped');
    for (const r of live) {
      const line = `${r.state}${r.reason ? ` — ${r.reason}` : ''}`;
      if (seen.get(r.id) !== line) out(`  ${r.id}: ${line}\n`);
      seen.set(r.id, line);
    }
    // Weights being fetched for a starting replica: a line every few seconds while it goes on.
    if (weights && live.some((r) => r.state === 'starting') && Date.now() - weightsAt >= 3000) {
      weightsAt = Date.now();
      for (const line of await weights().catch(() => [])) {
        if (!weightsSeen.has(line))
          out(`  weights ${line}
`);
        weightsSeen.add(line);
      }
    }
    const desired = models.find((m) => m.name === model)?.replicas ?? 0;
    const ready = live.filter((r) => r.state === 'ready').length;
    if (ready === desired && live.length === desired) {
      out(`${model}: ${ready} of ${desired} replicas ready\n`);
      return;
    }
    if (Date.now() > deadline)
      throw new Error(
        `${model}: ${ready} of ${desired} replicas ready after ${timeoutMs / 1000}s; see the reasons above and in the Temporal UI (the deployment keeps trying)`,
      );
    await new Promise((r) => setTimeout(r, 250));
  }
}
