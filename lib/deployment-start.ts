/** Starting a model's deployment workflow (`model/<m>`): the one place ctl deploy, ctl apply and the control plane do it. */
import type { Client, WorkflowHandle } from '@temporalio/client';
import { QUEUES, searchAttributes, workflowIds } from './names';

/** Starts `model/<model>`, or joins the one running (a second start never runs it twice). */
export function startModelDeployment(client: Pick<Client, 'workflow'>, model: string): Promise<WorkflowHandle> {
  return client.workflow.start('modelDeployment', {
    taskQueue: QUEUES.control, workflowId: workflowIds.model(model), args: [{ model }],
    workflowIdConflictPolicy: 'USE_EXISTING', typedSearchAttributes: [{ key: searchAttributes.model, value: model }],
  });
}
