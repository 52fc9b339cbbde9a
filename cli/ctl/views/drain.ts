/** How `ctl drain NODE --cancel` and `ctl uncordon NODE` say that they ended a running drain. */
import type { EndedDrain } from '../../../gateway/control/contract';

/** One line: which drain ended, how, and what became of the move it was making. */
export function endedDrainText(nodeId: string, e: EndedDrain): string {
  if (e.status === 'running') {
    return `${e.workflowId}: cancel requested, but it has not ended yet (its current step is finishing); the Temporal UI shows when it does`;
  }
  const how = e.status === 'cancelled' ? 'cancelled' : `${e.status} before the cancel reached it`;
  return `${e.workflowId} ended (${how})${e.note ? `: ${e.note}` : ''}`;
}

/** How long ctl waits for the control plane to end a drain (it waits up to 30 s for the workflow to close). */
export const END_DRAIN_TIMEOUT_MS = 40_000;

/** What a cancelled drain leaves: the node cordoned. */
export function stillCordoned(nodeId: string): string {
  return `${nodeId} stays cordoned: llmgw ctl uncordon ${nodeId} gives it back`;
}
