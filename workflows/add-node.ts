/** addNode (`add-node/<node>`): provisionNode, then onboardNode, as child workflows under their own ids. */
import { ApplicationFailure, executeChild, setCurrentDetails, upsertSearchAttributes } from '@temporalio/workflow';
import { QUEUES, searchAttributes, workflowIds } from '../lib/names';
import type { OnboardResult } from './contracts/onboard';
import type { AddNodeInput, AddNodeResult, ProvisionResult } from './contracts/provision';
import { failureCause } from './steps';

/** Both halves: the VM, then its identity and agent; each child keeps its own id (provision/<node>, onboard/<node>). */
export async function addNode(input: AddNodeInput): Promise<AddNodeResult> {
  upsertSearchAttributes([{ key: searchAttributes.node, value: [input.nodeId] }]);
  const started = Date.now();
  const child = async <R>(what: 'provisionNode' | 'onboardNode', workflowId: string, arg: unknown): Promise<R> => {
    try {
      return (await executeChild(what, {
        workflowId,
        taskQueue: QUEUES.control,
        args: [arg] as never,
        typedSearchAttributes: [{ key: searchAttributes.node, value: [input.nodeId] }],
      })) as R;
    } catch (err) {
      const c = failureCause(err);
      throw ApplicationFailure.create({
        type: c.type ?? 'LLMGW_PROVISION_FAILED',
        message: `adding ${input.nodeId}: ${c.message}`,
        nonRetryable: true,
      });
    }
  };
  setCurrentDetails(
    `adding **${input.nodeId}**: ${input.provision ? 'provision' : ''}${input.provision && input.onboard ? ', then ' : ''}${input.onboard ? 'onboard' : ''}`,
  );
  const provision = input.provision
    ? await child<ProvisionResult>('provisionNode', workflowIds.provision(input.nodeId), input.provision)
    : null;
  const onboard = input.onboard
    ? await child<OnboardResult>('onboardNode', workflowIds.onboard(input.nodeId), input.onboard)
    : null;
  return { nodeId: input.nodeId, provision, onboard, totalMs: Date.now() - started };
}
