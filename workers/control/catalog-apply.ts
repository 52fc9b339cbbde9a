/**
 * Carrying out a catalog plan (lib/catalog.ts): the control plane's own at start, and `llmgw ctl apply`'s. Each
 * model's deployment workflow does the work: it is started, scaled (its validated update), told its spec changed
 * (it rolls make-before-break) or told to retire (it drains and stops its replicas, then forgets the model).
 */
import type { Client } from '@temporalio/client';
import type { SignalDefinition } from '@temporalio/common';
import type { CatalogApplyAnswer } from '../../gateway/control/contract';
import { planCatalog, type LiveModel } from '../../lib/catalog';
import { startModelDeployment } from '../../lib/workflow-starts';
import { QUEUES, workflowIds } from '../../lib/names';
import type { Store } from '../../lib/store/store';
import type { ModelSpec } from '../../lib/types';
import { catalogChangedSignal, deploymentQuery, retireSignal, scaleUpdate } from '../../workflows/contracts/model';

/** What applying needs: the store and Temporal. */
export interface CatalogApplyDeps {
  store: Pick<Store, 'appliedModels' | 'listReplicas' | 'upsertModel'>;
  client: Pick<Client, 'workflow'>;
}

/** Each model as the cluster has it: the recorded spec and count, and whether (and with which spec) its deployment runs. */
async function liveModels(d: CatalogApplyDeps): Promise<Map<string, LiveModel>> {
  const replicas = await d.store.listReplicas();
  const live = new Map<string, LiveModel>();
  for (const { applied, desired } of await d.store.appliedModels()) {
    const handle = d.client.workflow.getHandle(workflowIds.model(applied.name));
    const running = (await handle.describe().catch(() => null))?.status.name === 'RUNNING';
    const state = running ? await handle.query(deploymentQuery).catch(() => null) : null;
    live.set(applied.name, {
      applied,
      desired,
      deployed: running,
      replicas: replicas.filter((r) => r.model === applied.name && r.state !== 'stopped').length,
      ...(state?.specHash ? { runningHash: state.specHash } : {}),
    });
  }
  return live;
}

/** Plans `catalog` against the cluster and, unless `dryRun`, carries the plan out; the errors name model and cause. */
export async function applyCatalog(
  d: CatalogApplyDeps,
  req: { catalog: readonly ModelSpec[]; prune: boolean; dryRun: boolean },
): Promise<CatalogApplyAnswer> {
  const live = await liveModels(d);
  const actions = planCatalog(req.catalog, live, { prune: req.prune });
  const errors: string[] = [];
  if (req.dryRun) return { dryRun: true, actions, errors };
  // Every catalog model's spec is recorded first (a new one with its count), so each deployment loads what it is told.
  for (const spec of req.catalog) await d.store.upsertModel(spec, live.has(spec.name));
  const signalWithStart = (model: string, signal: SignalDefinition<[]>): Promise<unknown> =>
    d.client.workflow.signalWithStart('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(model),
      args: [{ model }],
      signal,
    });
  for (const a of actions) {
    try {
      switch (a.kind) {
        case 'add':
        case 'deploy':
          await startModelDeployment(d.client, a.model);
          break;
        case 'scale':
          await (await startModelDeployment(d.client, a.model)).executeUpdate(scaleUpdate, { args: [a.to] });
          break;
        case 'roll':
          await signalWithStart(a.model, catalogChangedSignal);
          break;
        case 'remove':
          await signalWithStart(a.model, retireSignal);
          break;
        default:
          break;
      }
    } catch (err) {
      errors.push(`${a.model}: ${a.kind} failed: ${(err as Error).message}`);
    }
  }
  return { dryRun: false, actions, errors };
}
