/** The drainNode workflow: cordon a node, then move its replicas off one at a time, each replacement serving first. */
import {
  ApplicationFailure,
  CancellationScope,
  condition,
  getExternalWorkflowHandle,
  isCancellation,
  patched,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import { searchAttributes, workflowIds } from '../lib/names';
import type { Placement } from '../lib/placement';
import type { ReplicaId } from '../lib/types';
import {
  allowDowntimeSignal,
  drainProgressQuery,
  formatDrainProgress,
  moveKey,
  type CurrentMove,
  type DrainInput,
  type DrainProgress,
  type DrainResult,
  type MoveDowntime,
  type MoveStatus,
} from './contracts/drain';
import { replaceSignal, withdrawReplaceSignal } from './contracts/model';
import { nodesChangedSignal } from './contracts/replica';
import { control, moveWatch } from './proxies';

/** Marks drains that show the in-flight wait, offer and do stop-first moves, and give back a move when cancelled. */
const DRAIN_V2_PATCH = 'drain-inflight-stop-first-cancel';
/** How long a replacement stays unplaceable before --allow-downtime moves its original stop-first. */
const STOP_FIRST_AFTER_MS = 10_000;
/** How long a cancelled drain waits for its withdrawn replacement to stop (checked every second). */
const GIVE_BACK_WAIT_S = 20;

/** Moves every replica off `nodeId` (make before break), then ends; the node stays cordoned. */
export async function drainNode(input: DrainInput): Promise<DrainResult> {
  const v2 = patched(DRAIN_V2_PATCH);
  let allowDowntime = input.allowDowntime ?? false;
  setHandler(allowDowntimeSignal, () => void (allowDowntime = true));
  const progress: DrainProgress = {
    nodeId: input.nodeId,
    phase: 'cordoning',
    moved: 0,
    total: 0,
    current: null,
    downtime: [],
  };
  const moved: ReplicaId[] = [];
  setHandler(drainProgressQuery, () => progress);
  upsertSearchAttributes([{ key: searchAttributes.node, value: [input.nodeId] }]);
  const startedAt = Date.now();
  const show = (): void => setCurrentDetails(formatDrainProgress(progress));

  /** Runs `poll` until it answers (its answer) or --allow-downtime arrives (null; the poll is cancelled). */
  const untilAllowed = async (poll: () => Promise<MoveStatus>): Promise<MoveStatus | null> => {
    const scope = new CancellationScope();
    const first = await scope.run(() => Promise.race([poll(), condition(() => allowDowntime).then(() => null)]));
    scope.cancel();
    return first;
  };

  /** Moves one replica off the node; a stop-first move returns its downtime. */
  const move = async (next: { replicaId: ReplicaId; model: string }): Promise<MoveDowntime | null> => {
    const deployment = getExternalWorkflowHandle(workflowIds.model(next.model));
    const cur: CurrentMove = {
      replicaId: next.replicaId,
      replacement: null,
      state: null,
      reason: null,
      draining: null,
      stopFirst: false,
      hint: null,
    };
    progress.current = cur;
    show();
    let seen: string | null = null;
    let asked = 0;
    let waitingSince: number | null = null;
    let checked: string | null | undefined;
    let offered = false;
    let woken = false;
    // A stop-first check is due once the replacement has waited STOP_FIRST_AFTER_MS: again when its reason changes,
    // or when --allow-downtime arrives after the drain offered it.
    const checkDue = (): boolean =>
      v2 && !cur.stopFirst && waitingSince !== null && (cur.reason !== checked || (allowDowntime && offered));
    for (;;) {
      // Asked again on every poll: the deployment ignores a repeat, and finishes a move whose ready signal it missed.
      if (Date.now() - asked > 15_000) {
        await deployment
          .signal(replaceSignal, {
            replicaId: next.replicaId,
            why: `drain ${input.nodeId}`,
            ...(cur.stopFirst ? { stopFirst: true } : {}),
          })
          .catch((err: unknown) => {
            if (isCancellation(err)) throw err;
            throw ApplicationFailure.nonRetryable(
              `replica ${next.replicaId} on ${input.nodeId} belongs to no running deployment (${workflowIds.model(next.model)}): ` +
                `run llmgw ctl deploy ${next.model}, then drain again`,
              'LLMGW_NO_DEPLOYMENT',
            );
          });
        asked = Date.now();
      }
      // Long-poll, but never past the drain's deadline (so --timeout ends it on time) or a stop-first check that is due.
      const left = input.timeoutS === null ? 20_000 : input.timeoutS * 1000 - (Date.now() - startedAt);
      const untilCheck: number =
        checkDue() && waitingSince !== null ? waitingSince + STOP_FIRST_AFTER_MS - Date.now() : 20_000;
      const watch = cur.stopFirst && cur.replacement ? { replacement: cur.replacement } : { known: cur.replacement };
      const poll = (): Promise<MoveStatus> =>
        moveWatch.moveStatus({
          model: next.model,
          replicaId: next.replicaId,
          nodeId: input.nodeId,
          seen,
          waitMs: Math.max(0, Math.min(20_000, left, untilCheck)),
          ...watch,
        });
      // Offered --allow-downtime: its arrival ends the long-poll at once rather than at its end.
      const status: MoveStatus | null = offered && !allowDowntime ? await untilAllowed(poll) : await poll();
      if (status === null) continue;
      if (status.kind === 'moved') {
        // It left by a rebuild elsewhere first: its replacement is not needed (if it serves already, it stays).
        if (status.leftByItself && status.replacement) {
          await deployment
            .signal(withdrawReplaceSignal, {
              replicaId: next.replicaId,
              why: `${next.replicaId} left ${input.nodeId} by a rebuild`,
            })
            .catch(() => undefined);
        }
        if (!cur.stopFirst || !cur.replacement) return null;
        return {
          replicaId: next.replicaId,
          replacement: cur.replacement,
          downMs: await control.moveDowntime({ original: next.replicaId, replacement: cur.replacement }),
        };
      }
      seen = moveKey(status);
      Object.assign(cur, {
        replacement: status.replacement ?? cur.replacement,
        state: status.state,
        reason: status.reason,
        draining: status.draining ?? null,
      });
      // Stop-first: the original is gone and its GPUs free; the replacement tries placement now, not at its next retry.
      // Forced: the original is gone from the node, which is all a removal needs; its replacement waits for room elsewhere.
      if (input.force && cur.stopFirst && status.originalGone) return null;
      if (status.originalGone && status.replacement && !woken) {
        await getExternalWorkflowHandle(workflowIds.replica(status.replacement))
          .signal(nodesChangedSignal)
          .catch(() => undefined);
        woken = true;
      }
      waitingSince = status.state === 'waiting' ? (waitingSince ?? Date.now()) : null;
      if (waitingSince === null && !cur.stopFirst) cur.hint = null;
      if (
        checkDue() &&
        status.replacement &&
        waitingSince !== null &&
        Date.now() - waitingSince >= STOP_FIRST_AFTER_MS
      ) {
        // Would the replacement fit if the original were gone?
        checked = status.reason;
        const check: Placement = await control.stopFirstCheck({
          model: next.model,
          original: next.replicaId,
          replacement: status.replacement,
        });
        offered = check.kind === 'placed' && !allowDowntime;
        // Forced (remove-node --force): the original stops even when its replacement fits nowhere yet.
        if (check.kind === 'unplaceable' && !input.force)
          cur.hint = `stopping ${next.replicaId} first would not help: ${check.reason}`;
        else if (offered)
          cur.hint = `it fits once ${next.replicaId} is gone: llmgw ctl drain ${input.nodeId} --allow-downtime moves it stop-first`;
        else {
          cur.stopFirst = true;
          cur.hint = `--allow-downtime: ${next.replicaId} drains and stops first, then ${status.replacement} is placed`;
          asked = 0;
        }
      }
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
  };

  /** After a cancel: the move in progress gives its place back to the original, unless the original already left routing. */
  const giveBack = async (cur: CurrentMove, model: string): Promise<string> => {
    const original = await control.replicaState(cur.replicaId);
    if (original === null || original === 'stopping' || original === 'stopped') {
      return `${cur.replicaId} was already ${original ?? 'gone'}: its move${cur.replacement ? ` to ${cur.replacement}` : ''} completes`;
    }
    await getExternalWorkflowHandle(workflowIds.model(model))
      .signal(withdrawReplaceSignal, { replicaId: cur.replicaId, why: `drain of ${input.nodeId} cancelled` })
      .catch(() => undefined);
    if (!cur.replacement) return `its replacement, if one started, is withdrawn: ${cur.replicaId} keeps serving`;
    // Until the deployment has acted, so that a cancel that returned means the model is back at its count.
    for (let i = 0; i < GIVE_BACK_WAIT_S; i++) {
      const rep = await control.replicaState(cur.replacement);
      if (rep === 'ready') return `its replacement ${cur.replacement} already served: the move completes`;
      if (rep === 'stopped') return `its replacement ${cur.replacement} stopped: ${cur.replicaId} keeps serving`;
      await sleep(1000);
    }
    return `its replacement ${cur.replacement} is withdrawn and still stopping: ${cur.replicaId} keeps serving`;
  };

  show();
  let model = '';
  try {
    await control.cordonNode({ nodeId: input.nodeId, why: `draining (${workflowIds.drain(input.nodeId)})` });
    progress.phase = 'moving';
    for (;;) {
      const left = await control.replicasOnNode(input.nodeId);
      progress.total = progress.moved + left.length;
      const next = left[0];
      if (!next) break;
      model = next.model;
      const down = await move(next);
      if (down) progress.downtime?.push(down);
      moved.push(next.replicaId);
      progress.moved++;
      progress.current = null;
    }
  } catch (err) {
    if (v2 && isCancellation(err)) {
      const cur = progress.current;
      // Not cancellable itself: the replacement must not outlive the cancelled drain beside its original.
      if (cur) progress.note = await CancellationScope.nonCancellable(() => giveBack(cur, model));
      progress.phase = 'cancelled';
      show();
    }
    throw err;
  }
  progress.phase = 'done';
  show();
  return { nodeId: input.nodeId, moved, ...(progress.downtime?.length ? { downtime: progress.downtime } : {}) };
}
