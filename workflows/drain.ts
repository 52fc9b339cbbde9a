/** The drainNode workflow: cordon a node, then move its replicas off one at a time, each replacement serving first. */
import {
  ApplicationFailure, getExternalWorkflowHandle, setCurrentDetails, setHandler, upsertSearchAttributes,
} from '@temporalio/workflow';
import type { MoveStatus } from '../activities/control';
import { searchAttributes, workflowIds } from '../lib/names';
import type { ReplicaId } from '../lib/types';
import { drainProgressQuery, type DrainInput, type DrainProgress, type DrainResult } from './contracts/drain';
import { replaceSignal, withdrawReplaceSignal } from './contracts/model';
import { control, moveWatch } from './proxies';

/** Moves every replica off `nodeId` (make before break), then ends; the node stays cordoned. */
export async function drainNode(input: DrainInput): Promise<DrainResult> {
  const progress: DrainProgress = { nodeId: input.nodeId, phase: 'cordoning', moved: 0, total: 0, current: null };
  const moved: ReplicaId[] = [];
  setHandler(drainProgressQuery, () => progress);
  upsertSearchAttributes([{ key: searchAttributes.node, value: [input.nodeId] }]);
  const startedAt = Date.now();
  const show = (): void => {
    const c = progress.current;
    setCurrentDetails(`**${progress.phase}** ${input.nodeId}: moved ${progress.moved} of ${progress.total}${
      c ? `\n\nnow moving **${c.replicaId}** → ${c.replacement ?? '(starting a replacement)'}${c.state ? `: ${c.state}` : ''}${c.reason ? ` — ${c.reason}` : ''}` : ''}`);
  };

  show();
  await control.cordonNode({ nodeId: input.nodeId, why: `draining (${workflowIds.drain(input.nodeId)})` });
  progress.phase = 'moving';
  for (;;) {
    const left = await control.replicasOnNode(input.nodeId);
    progress.total = progress.moved + left.length;
    const next = left[0];
    if (!next) break;
    progress.current = { replicaId: next.replicaId, replacement: null, state: null, reason: null };
    show();
    let seen: string | null = null;
    let asked = 0;
    for (;;) {
      // Asked again on every poll: the deployment ignores a repeat, and finishes a move whose ready signal it missed.
      if (Date.now() - asked > 15_000) {
        await getExternalWorkflowHandle(workflowIds.model(next.model)).signal(replaceSignal, { replicaId: next.replicaId, why: `drain ${input.nodeId}` }).catch(() => {
          throw ApplicationFailure.nonRetryable(
            `replica ${next.replicaId} on ${input.nodeId} belongs to no running deployment (${workflowIds.model(next.model)}): ` +
              `run llmgw ctl deploy ${next.model}, then drain again`,
            'LLMGW_NO_DEPLOYMENT',
          );
        });
        asked = Date.now();
      }
      // Long-poll, but never past the drain's deadline, so --timeout ends it on time.
      const left = input.timeoutS === null ? 20_000 : input.timeoutS * 1000 - (Date.now() - startedAt);
      const status: MoveStatus = await moveWatch.moveStatus({ model: next.model, replicaId: next.replicaId, nodeId: input.nodeId, seen, waitMs: Math.max(0, Math.min(20_000, left)) });
      if (status.kind === 'moved') {
        // It left by a rebuild elsewhere first: its replacement is not needed (if it serves already, it stays).
        if (status.leftByItself && status.replacement) {
          await getExternalWorkflowHandle(workflowIds.model(next.model)).signal(withdrawReplaceSignal, { replicaId: next.replicaId, why: `${next.replicaId} left ${input.nodeId} by a rebuild` }).catch(() => undefined);
        }
        break;
      }
      seen = JSON.stringify(status);
      progress.current = { replicaId: next.replicaId, replacement: status.replacement, state: status.state, reason: status.reason };
      show();
      if (input.timeoutS !== null && Date.now() - startedAt > input.timeoutS * 1000) {
        progress.phase = 'timed-out';
        show();
        throw ApplicationFailure.nonRetryable(
          `drain of ${input.nodeId} timed out after ${input.timeoutS}s moving ${next.replicaId}` +
            `${status.replacement ? `: its replacement ${status.replacement} is ${status.state ?? 'not started'}${status.reason ? ` — ${status.reason}` : ''}` : ''}` +
            `; the node stays cordoned (llmgw ctl uncordon ${input.nodeId} to undo), run the drain again to go on`,
          'LLMGW_DRAIN_TIMEOUT',
        );
      }
    }
    moved.push(next.replicaId);
    progress.moved++;
    progress.current = null;
  }
  progress.phase = 'done';
  show();
  return { nodeId: input.nodeId, moved };
}
