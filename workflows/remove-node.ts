/**
 * The removeNode workflow (`remove-node/<node>`): drains the node (a child drain/<node>), stops its agent and
 * revokes its certificates on llmgw-ca, forgets its host keys and records on llmgw-control, and with --destroy-vm
 * removes its VM on llmgw-proxmox — only a VM llmgw created. It refuses a node holding a replica that fits nowhere
 * else (a model's last, above all) unless forced. Every step is idempotent: running it again finishes the job.
 */
import { ApplicationFailure, executeChild, setHandler, upsertSearchAttributes } from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import { QUEUES, searchAttributes, workflowIds } from '../lib/names';
import { removalRefusal } from '../lib/removal';
import { downtimeText, type DrainInput, type DrainResult } from './contracts/drain';
import type { StepResult } from './contracts/onboard';
import type { StepLine } from './contracts/provision';
import {
  REMOVE_STEPS,
  removeNodeProgressQuery,
  type RemoveNodeInput,
  type RemoveNodeResult,
  type RemoveStepId,
} from './contracts/remove-node';
import { drainNode } from './drain';
import { control, removal } from './proxies';
import { stepRunner, type StepFailed } from './steps';

/** Removes the node step by step; a failure names its step and what to do. */
export async function removeNode(input: RemoveNodeInput): Promise<RemoveNodeResult> {
  const { nodeId } = input;
  const steps = REMOVE_STEPS.map((s): StepLine => ({
    id: s.id,
    title: s.title,
    state: 'pending',
    summary: null,
    ms: null,
    waitedMs: null,
    error: null,
  }));
  setHandler(removeNodeProgressQuery, () => ({ nodeId, steps }));
  upsertSearchAttributes([{ key: searchAttributes.node, value: [nodeId] }]);
  const started = Date.now();
  const runner = stepRunner<RemoveStepId>(
    steps,
    () => `removing **${nodeId}**${input.force ? ' (--force)' : ''}${input.destroyVm ? ' with its VM' : ''}`,
  );
  const step = async <R extends StepResult>(id: RemoveStepId, fn: () => Promise<R>): Promise<R> => {
    try {
      return await runner(id, fn);
    } catch (err) {
      const e = err as StepFailed;
      throw ApplicationFailure.create({
        type: e.type ?? 'LLMGW_REMOVE_FAILED',
        message: `removing ${nodeId} failed at step "${e.step}": ${e.message}`,
        nonRetryable: true,
      });
    }
  };
  const skip = (id: RemoveStepId, summary: string): Promise<StepResult> =>
    step(id, async () => ({ summary, waitedMs: 0, changed: false }));

  const check = await step('check', async () => {
    const c = await control.removalCheck({ nodeId });
    if (c.blockers.length && !input.force)
      throw ApplicationFailure.nonRetryable(removalRefusal(nodeId, c.blockers), 'LLMGW_LAST_REPLICA');
    return c;
  });
  if (check.registered) {
    await step('drain', async () => {
      const drain: DrainInput = {
        nodeId,
        timeoutS: null,
        ...(input.force ? { allowDowntime: true, force: true } : {}),
      };
      let r: DrainResult;
      try {
        r = await executeChild(drainNode, {
          workflowId: workflowIds.drain(nodeId),
          taskQueue: QUEUES.control,
          args: [drain],
        });
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
        throw ApplicationFailure.nonRetryable(
          `a drain of ${nodeId} is running (${workflowIds.drain(nodeId)}): let it finish, or end it with llmgw ctl drain ${nodeId} --cancel, then remove the node again`,
          'LLMGW_REMOVE_FAILED',
        );
      }
      // Forced, a replica that fits nowhere else left the node by stopping: its replacement waits for room.
      const stopped = new Set(check.blockers.map((b) => b.replicaId));
      const moved = r.moved.filter((id) => !stopped.has(id));
      const gone = r.moved.filter((id) => stopped.has(id));
      const parts = [
        ...(moved.length ? [`moved ${moved.join(', ')}${downtimeText(r.downtime)}`] : []),
        ...(gone.length
          ? [`stopped ${gone.join(', ')} (--force: it fits nowhere else; its replacement waits for room)`]
          : []),
      ];
      return { summary: parts.join('; ') || 'it held no replica', waitedMs: 0, changed: r.moved.length > 0 };
    });
  } else await skip('drain', 'not registered: nothing to drain');
  const { addr } = input.ssh;
  if (addr) {
    await step('stopAgent', () =>
      removal.ca.stopAgent({
        nodeId,
        addr,
        sshPort: input.ssh.port,
        sshUser: input.ssh.user,
        sshKeyPath: input.ssh.keyPath,
        optional: input.force || input.destroyVm,
      }),
    );
  } else await skip('stopAgent', 'no address known for it (pass --addr): not stopped; its certificate is revoked next');
  await step('revoke', async () => {
    const n = await removal.ca.revokeNode({ nodeId, reason: `node removed (${workflowIds.removeNode(nodeId)})` });
    return {
      summary: n
        ? `${n} certificate${n === 1 ? '' : 's'} revoked; the CRL republished`
        : 'no unrevoked certificate (already revoked, or never issued)',
      waitedMs: 0,
      changed: n > 0,
    };
  });
  await step('forget', () => control.forgetNode({ nodeId }));
  if (input.destroyVm) {
    await step('destroyVm', async () => {
      const r = await removal.proxmox.destroyNodeVm({ nodeId });
      return { summary: r.summary, waitedMs: 0, changed: r.removed };
    });
  } else await skip('destroyVm', 'kept (--destroy-vm removes a VM llmgw created)');
  return { nodeId, steps, totalMs: Date.now() - started };
}
