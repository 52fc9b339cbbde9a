/** The modelDeployment workflow: keeps a catalog model's desired number of replicas running. */
import {
  ApplicationFailure, ParentClosePolicy, condition, continueAsNew,
  getExternalWorkflowHandle, proxyActivities, setCurrentDetails, setHandler, startChild, upsertSearchAttributes, workflowInfo,
} from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { ControlActivities } from '../activities/control';
import { QUEUES, searchAttributes, workflowIds } from '../lib/names';
import { deploymentQuery, scaleUpdate, type ModelDeploymentInput, type ModelDeploymentState } from './contracts/model';
import { stopSignal } from './contracts/replica';
import { replica } from './replica';

const control = proxyActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 10, initialInterval: '500ms', maximumInterval: '10s' },
});

/** Most replicas one model may ask for: a typo of 1000 should not try to place 1000 replicas. */
export const MAX_REPLICAS = 64;

/** Keeps `desired` replica workflows (`replica/<model>-<n>`) running; `scale` changes the count. */
export async function modelDeployment(input: ModelDeploymentInput): Promise<void> {
  const state: ModelDeploymentState = input.state ?? { desired: null, replicas: [], nextIndex: 0 };
  let dirty = true;
  setHandler(deploymentQuery, () => state);
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
        if (!Number.isInteger(n) || n < 0 || n > MAX_REPLICAS) throw new Error(`replicas must be a whole number from 0 to ${MAX_REPLICAS}, got ${n}`);
      },
    },
  );
  upsertSearchAttributes([{ key: searchAttributes.model, value: input.model }]);

  for (;;) {
    await condition(() => dirty);
    dirty = false;
    const spec = await control.loadModel(input.model);
    if (!spec) throw ApplicationFailure.nonRetryable(`model ${input.model} is not in the catalog: add it to server.yaml's catalog`, 'UnknownModel');
    const profile = spec.profiles[0];
    if (!profile) throw ApplicationFailure.nonRetryable(`model ${input.model} has no profile`, 'NoProfile');
    state.desired ??= spec.replicas;
    while (state.replicas.length < state.desired) {
      const replicaId = `${input.model}-${state.nextIndex++}`;
      try {
        await startChild(replica, {
          workflowId: workflowIds.replica(replicaId),
          taskQueue: QUEUES.control,
          parentClosePolicy: ParentClosePolicy.ABANDON,
          args: [{ replicaId, model: input.model, source: spec.source, profile }],
        });
      } catch (err) {
        // Already running (a replay after continue-as-new, or a replica left from before): adopt it.
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      }
      state.replicas.push(replicaId);
    }
    while (state.replicas.length > state.desired) {
      const replicaId = state.replicas.pop() as string;
      try {
        await getExternalWorkflowHandle(workflowIds.replica(replicaId)).signal(stopSignal);
      } catch {
        // Already gone (stopped or terminated by hand): nothing left to stop.
      }
    }
    setCurrentDetails(`**${state.desired}** replicas desired: ${state.replicas.join(', ') || 'none'}`);
    if (workflowInfo().continueAsNewSuggested) {
      await continueAsNew<typeof modelDeployment>({ model: input.model, state });
    }
  }
}
