/**
 * provisionNode (`provision/<node>`): creates the node's VM on Proxmox, one activity per step on llmgw-proxmox.
 * If a step after the create fails, the VM this run created is removed — never one it did not create.
 */
import { ApplicationFailure, setHandler, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import { runTag } from '../lib/proxmox/tags';
import { searchAttributes } from '../lib/names';
import {
  PROVISION_STEPS,
  provisionProgressQuery,
  type ProvisionInput,
  type ProvisionProgress,
  type ProvisionResult,
  type ProvisionStepId,
  type StepLine,
} from './contracts/provision';
import { provisionProxies } from './proxies';
import { failureCause, stepRunner, StepFailed } from './steps';

/** Creates the node's VM step by step; a failure after the create removes the VM this run created. */
export async function provisionNode(input: ProvisionInput): Promise<ProvisionResult> {
  const progress: ProvisionProgress = {
    nodeId: input.nodeId,
    steps: PROVISION_STEPS.map((s): StepLine => ({
      id: s.id,
      title: s.title,
      state: 'pending',
      summary: null,
      ms: null,
      waitedMs: null,
      error: null,
    })),
    createdVmid: null,
  };
  setHandler(provisionProgressQuery, () => progress);
  upsertSearchAttributes([{ key: searchAttributes.node, value: [input.nodeId] }]);
  const started = Date.now();
  const { steps: act, sshWait, removal } = provisionProxies(input);
  const withTag = { ...input, runTag: runTag(workflowInfo().runId) };

  const run = stepRunner<ProvisionStepId>(
    progress.steps,
    () => `provisioning **${input.nodeId}** (VM ${input.vmid}, ${input.ip}, on ${input.pveNode})`,
  );

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
  return {
    nodeId: input.nodeId,
    vmid: input.vmid,
    address: input.ip.split('/')[0] as string,
    steps: progress.steps,
    totalMs: Date.now() - started,
    waitedMs,
  };
}
