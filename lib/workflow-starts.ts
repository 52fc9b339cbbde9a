/** Starting the workflows more than one caller starts: a model's deployment (ctl deploy, ctl apply, the control plane) and a node's removal. */
import type { Client, WorkflowHandle } from '@temporalio/client';
import { QUEUES, searchAttributes, workflowIds } from './names';

/** Starts `model/<model>`, or joins the one running (a second start never runs it twice). */
export function startModelDeployment(client: Pick<Client, 'workflow'>, model: string): Promise<WorkflowHandle> {
  return client.workflow.start('modelDeployment', {
    taskQueue: QUEUES.control,
    workflowId: workflowIds.model(model),
    args: [{ model }],
    workflowIdConflictPolicy: 'USE_EXISTING',
    typedSearchAttributes: [{ key: searchAttributes.model, value: model }],
  });
}

/** Starts `remove-node/<node>` with its input (workflows/contracts/remove-node.ts), or joins the one running. */
export function startRemoveNode<I extends { nodeId: string }>(
  client: Pick<Client, 'workflow'>,
  input: I,
): Promise<WorkflowHandle> {
  return client.workflow.start('removeNode', {
    taskQueue: QUEUES.control,
    workflowId: workflowIds.removeNode(input.nodeId),
    args: [input],
    workflowIdConflictPolicy: 'USE_EXISTING',
    typedSearchAttributes: [{ key: searchAttributes.node, value: [input.nodeId] }],
  });
}

/** Starts `drain/<node>` (ctl drain, the cluster page), or joins the one running. */
export function startDrain<I extends { nodeId: string }>(
  client: Pick<Client, 'workflow'>,
  input: I,
): Promise<WorkflowHandle> {
  return client.workflow.start('drainNode', {
    taskQueue: QUEUES.control,
    workflowId: workflowIds.drain(input.nodeId),
    args: [input],
    workflowIdConflictPolicy: 'USE_EXISTING',
    typedSearchAttributes: [{ key: searchAttributes.node, value: [input.nodeId] }],
  });
}

/** The Temporal UI page of a workflow (server.yaml's temporal.uiUrl and namespace). */
export function workflowLink(config: { temporal: { uiUrl: string; namespace: string } }, workflowId: string): string {
  return `${config.temporal.uiUrl}/namespaces/${config.temporal.namespace}/workflows/${encodeURIComponent(workflowId)}`;
}
