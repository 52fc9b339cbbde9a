/**
 * provisionNode (`provision/<node>`): creates the node's VM on Proxmox, one activity per step on llmgw-proxmox.
 * If a step after the create fails, the VM this run created is removed — never one it did not create.
 * addNode (`add-node/<node>`): provisionNode, then onboardNode, as child workflows under their own ids.
 */
import { ApplicationFailure, executeChild, setCurrentDetails, setHandler, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import { runTag } from '../lib/proxmox/tags';
import { QUEUES, searchAttributes, workflowIds } from '../lib/names';
import type { OnboardResult } from './contracts/onboard';
import {
  PROVISION_STEPS, provisionProgressQuery, type AddNodeInput, type AddNodeResult, type ProvisionInput, type ProvisionProgress, type ProvisionResult,
  type ProvisionStepId, type StepLine,
} from './contracts/provision';
import { provisionProxies } from './proxies';
import { failureCause, stepRunner, StepFailed } from './steps';

export async function provisionNode(input: ProvisionInput): Promise<ProvisionResult> {
  const progress: ProvisionProgress = {
    nodeId: input.nodeId,
    steps: PROVISION_STEPS.map((s): StepLine => ({ id: s.id, title: s.title, state: 'pending', summary: null, ms: null, waitedMs: null, error: null })),
    createdVmid: null,
  };
  setHandler(provisionProgressQuery, () => progress);
  upsertSearchAttributes([{ key: searchAttributes.node, value: [input.nodeId] }]);
  const started = Date.now();
  const { steps: act, sshWait, removal } = provisionProxies(input);
  const withTag = { ...input, runTag: runTag(workflowInfo().runId) };

  const run = stepRunner<ProvisionStepId>(progress.steps, () => `provisioning **${input.nodeId}** (VM ${input.vmid}, ${input.ip}, on ${input.pveNode})`);

  try {
    await run('checkVmid', () => act.checkVmid(input));
    const created = await run('createVm', () => act.createVm(withTag));
    if (created.created) progress.createdVmid = input.vmid;
    await run('resizeDisk', () => act.resizeDisk(withTag));
    await run('startVm', () => act.startVm(withTag));
    await run('waitForSshPort', () => sshWait.waitForSshPort(withTag));
  } catch (err) {
    const e = err instanceof StepFailed ? err : new StepFailed('?', failureCause(err).message, null);
    let undo = '';
    if (progress.createdVmid !== null || progress.steps.find((s) => s.id === 'createVm')?.state === 'failed') {
      // The create may have gone through even when its activity failed: removeVm checks the VM is this run's.
      try {
        undo = ` — ${(await removal.removeVm(withTag)).summary}`;
      } catch (rmErr) {
        undo = ` — removing the VM it created failed too (${failureCause(rmErr).message}): remove VM ${input.vmid} on the Proxmox host (qm destroy ${input.vmid})`;
      }
    }
    throw ApplicationFailure.create({
      type: e.type ?? 'LLMGW_PROVISION_FAILED',
      message: `provisioning ${input.nodeId} failed at step "${e.step}": ${e.message}${undo}`,
      nonRetryable: true,
    });
  }
  const waitedMs = progress.steps.reduce((n, s) => n + (s.waitedMs ?? 0), 0);
  return { nodeId: input.nodeId, vmid: input.vmid, address: input.ip.split('/')[0] as string, steps: progress.steps, totalMs: Date.now() - started, waitedMs };
}

/** Both halves: the VM, then its identity and agent; each child keeps its own id (provision/<node>, onboard/<node>). */
export async function addNode(input: AddNodeInput): Promise<AddNodeResult> {
  upsertSearchAttributes([{ key: searchAttributes.node, value: [input.nodeId] }]);
  const started = Date.now();
  const child = async <R>(what: 'provisionNode' | 'onboardNode', workflowId: string, arg: unknown): Promise<R> => {
    try {
      return await executeChild(what, { workflowId, taskQueue: QUEUES.control, args: [arg] as never, typedSearchAttributes: [{ key: searchAttributes.node, value: [input.nodeId] }] }) as R;
    } catch (err) {
      const c = failureCause(err);
      throw ApplicationFailure.create({ type: c.type ?? 'LLMGW_PROVISION_FAILED', message: `adding ${input.nodeId}: ${c.message}`, nonRetryable: true });
    }
  };
  setCurrentDetails(`adding **${input.nodeId}**: ${input.provision ? 'provision' : ''}${input.provision && input.onboard ? ', then ' : ''}${input.onboard ? 'onboard' : ''}`);
  const provision = input.provision ? await child<ProvisionResult>('provisionNode', workflowIds.provision(input.nodeId), input.provision) : null;
  const onboard = input.onboard ? await child<OnboardResult>('onboardNode', workflowIds.onboard(input.nodeId), input.onboard) : null;
  return { nodeId: input.nodeId, provision, onboard, totalMs: Date.now() - started };
}
