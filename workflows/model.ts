/** The modelDeployment workflow: keeps a catalog model's desired number of replicas running. */
import {
  ApplicationFailure,
  ParentClosePolicy,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  setCurrentDetails,
  setHandler,
  startChild,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import { specHash } from '../lib/catalog';
import { QUEUES, replicaIdFor, searchAttributes, workflowIds } from '../lib/names';
import type { ReplicaId } from '../lib/types';
import {
  catalogChangedSignal,
  deploymentQuery,
  replaceSignal,
  replicaReadySignal,
  retireSignal,
  scaleUpdate,
  withdrawReplaceSignal,
  type ModelDeploymentInput,
  type ModelDeploymentState,
} from './contracts/model';
import { stopSignal } from './contracts/replica';
import { control, retirement } from './proxies';
import { replica } from './replica';

/** Signals a replica to stop; one already gone (stopped, or terminated by hand) needs nothing. */
async function stopReplica(replicaId: ReplicaId): Promise<void> {
  try {
    await getExternalWorkflowHandle(workflowIds.replica(replicaId)).signal(stopSignal);
  } catch {
    // already gone
  }
}

/** Most replicas one model may ask for: a typo of 1000 should not try to place 1000 replicas. */
export const MAX_REPLICAS = 64;

/** Why a replacement runs when the catalog spec changed (ctl apply): one such replacement at a time. */
const ROLL_WHY = 'catalog spec changed';

/** Keeps `desired` replica workflows (`replica/<model>-<n>`) running; `scale` changes the count. */
export async function modelDeployment(input: ModelDeploymentInput): Promise<void> {
  const state: ModelDeploymentState = input.state ?? { desired: null, replicas: [], nextIndex: 0 };
  const replacing = (state.replacing ??= []);
  const requested: { replicaId: ReplicaId; why: string; stopFirst?: boolean }[] = [];
  const withdrawn: ReplicaId[] = [];
  const readyNow: ReplicaId[] = [];
  let dirty = true;
  setHandler(deploymentQuery, () => state);
  setHandler(replaceSignal, (req) => {
    requested.push(req);
    dirty = true;
  });
  setHandler(withdrawReplaceSignal, (req) => {
    withdrawn.push(req.replicaId);
    dirty = true;
  });
  setHandler(replicaReadySignal, (id) => {
    readyNow.push(id);
    dirty = true;
  });
  setHandler(catalogChangedSignal, () => void (dirty = true));
  setHandler(retireSignal, () => {
    state.retiring = true;
    dirty = true;
  });
  setHandler(
    scaleUpdate,
    async (n: number) => {
      await control.setDesiredReplicas({ model: input.model, replicas: n });
      state.desired = n;
      dirty = true;
      return n;
    },
    {
      validator: (n: number) => {
        if (!Number.isInteger(n) || n < 0 || n > MAX_REPLICAS)
          throw new Error(`replicas must be a whole number from 0 to ${MAX_REPLICAS}, got ${n}`);
      },
    },
  );
  upsertSearchAttributes([{ key: searchAttributes.model, value: input.model }]);

  for (;;) {
    await condition(() => dirty);
    dirty = false;
    const spec = await control.loadModel(input.model);
    if (!spec)
      throw ApplicationFailure.nonRetryable(
        `model ${input.model} is not in the catalog: add it to server.yaml's catalog`,
        'UnknownModel',
      );
    const profile = spec.profiles[0];
    if (!profile) throw ApplicationFailure.nonRetryable(`model ${input.model} has no profile`, 'NoProfile');
    state.desired ??= spec.replicas;
    if (state.retiring) state.desired = 0;
    // A new spec (ctl apply) marks every replica started with the old one stale; they are replaced one at a time.
    const hash = specHash(spec);
    if (state.specHash !== undefined && state.specHash !== hash) state.stale = [...state.replicas];
    state.specHash = hash;
    state.stale = (state.stale ?? []).filter(
      (id) => state.replicas.includes(id) && !replacing.some((r) => r.old === id),
    );
    const rolling = replacing.some((r) => r.why === ROLL_WHY);
    const nextStale = rolling ? undefined : state.stale.shift();
    if (nextStale) requested.push({ replicaId: nextStale, why: ROLL_WHY });
    const start = async (replicaId: ReplicaId): Promise<void> => {
      try {
        await startChild(replica, {
          workflowId: workflowIds.replica(replicaId),
          taskQueue: QUEUES.control,
          parentClosePolicy: ParentClosePolicy.ABANDON,
          args: [
            {
              replicaId,
              model: input.model,
              source: spec.source,
              ...(spec.sha256 ? { sha256: spec.sha256 } : {}),
              ...(spec.startTimeoutS ? { startTimeoutS: spec.startTimeoutS } : {}),
              profile,
              profiles: spec.profiles,
              specHash: hash,
            },
          ],
        });
      } catch (err) {
        // Already running (a replay after continue-as-new, or a replica left from before): adopt it.
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      }
    };
    // Make before break: the replacement takes the old one's place in the list at once (so scaling counts it),
    // and the old one keeps serving until the replacement reports ready.
    for (const req of requested.splice(0)) {
      const at = state.replicas.indexOf(req.replicaId);
      const pending = replacing.find((r) => r.old === req.replicaId);
      if (pending) {
        if (req.stopFirst && !pending.stopFirst) {
          // --allow-downtime: the replacement cannot be placed while the original holds what it needs, so the
          // original drains and stops first; the replacement then takes its place (the drain wakes it).
          pending.stopFirst = true;
          await stopReplica(pending.old);
          continue;
        }
        // Asked again (the drain re-asks while it waits): if its ready signal was missed, finish it now.
        if ((await control.replicaState(pending.new)) === 'ready') readyNow.push(pending.new);
        continue;
      }
      if (at < 0) continue;
      const replicaId = replicaIdFor(input.model, state.nextIndex++);
      await start(replicaId);
      state.replicas[at] = replicaId;
      replacing.push({ old: req.replicaId, new: replicaId, why: req.why });
    }
    for (const old of withdrawn.splice(0)) {
      const at = replacing.findIndex((r) => r.old === old);
      const r = replacing[at];
      // A stop-first move cannot be withdrawn: its original is already stopping, the replacement is all there is.
      if (!r || r.stopFirst) continue;
      if ((await control.replicaState(r.new)) === 'ready') {
        readyNow.push(r.new);
        continue;
      }
      replacing.splice(at, 1);
      const slot = state.replicas.indexOf(r.new);
      if (slot >= 0) state.replicas[slot] = r.old;
      await stopReplica(r.new);
    }
    for (const id of readyNow.splice(0)) {
      const done = replacing.findIndex((r) => r.new === id);
      if (done < 0) continue;
      const [r] = replacing.splice(done, 1);
      if (r) await stopReplica(r.old);
    }
    while (state.replicas.length < state.desired) {
      const replicaId = replicaIdFor(input.model, state.nextIndex++);
      await start(replicaId);
      state.replicas.push(replicaId);
    }
    while (state.replicas.length > state.desired) {
      const replicaId = state.replicas.pop() as ReplicaId;
      await stopReplica(replicaId);
      // A replacement scaled away takes its original with it (it was kept only until the replacement served).
      const r = replacing.findIndex((x) => x.new === replicaId);
      if (r >= 0) await stopReplica(replacing.splice(r, 1)[0]?.old as ReplicaId);
    }
    setCurrentDetails(
      `**${state.desired}** replicas desired: ${state.replicas.join(', ') || 'none'}${
        replacing.length ? `\n\nreplacing: ${replacing.map((r) => `${r.old} → ${r.new} (${r.why})`).join(', ')}` : ''
      }${
        state.stale?.length ? `\n\nto roll to the new spec: ${state.stale.join(', ')}` : ''
      }${state.retiring ? '\n\nretiring: removed from the catalog' : ''}`,
    );
    if (state.retiring && state.replicas.length === 0 && replacing.length === 0) {
      // Every replica was told to stop; the model is forgotten once none is left running (each drains first).
      await retirement.retireModel({ model: input.model });
      return;
    }
    if (
      workflowInfo().continueAsNewSuggested &&
      requested.length === 0 &&
      readyNow.length === 0 &&
      withdrawn.length === 0
    ) {
      await continueAsNew<typeof modelDeployment>({ model: input.model, state });
    }
  }
}
