/**
 * Onboarding's last step, on llmgw-ca: the node's engine install and probe. Once the agent registered, the control
 * plane has it install the engines server.yaml names and run each (ensureEngines); this waits for that run's record
 * and fails with the engine's own error when one failed — the reference's "engine probe, loud on failure" for
 * engines installed after registration too, not only the binaries given on the command line.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { ErrorCode } from '../../lib/errors';
import { workflowIds } from '../../lib/names';
import type { HostKeyStore } from '../../lib/store/host-keys';
import type { OnboardHeartbeat, OnboardInput, StepResult } from '../../workflows/contracts/onboard';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Builds waitEngines over the CA host's view of MySQL. */
export function createEnginesWait(deps: { hostKeys: HostKeyStore; heartbeat?: (d: OnboardHeartbeat) => void }) {
  const beat = deps.heartbeat ?? ((d: OnboardHeartbeat): void => Context.current().heartbeat(d));
  return {
    /**
     * Waits (up to `enginesTimeoutS`) for an engine probe recorded after the agent's (re)start `since` (or its last
     * registration, when it was left running); fails with LLMGW_ENGINE_PROBE_FAILED naming each engine that failed.
     */
    async waitEngines(input: OnboardInput & { since: string | null; enginesTimeoutS: number }): Promise<StepResult> {
      const started = Date.now();
      for (;;) {
        const reg = await deps.hostKeys.registration(input.nodeId);
        const probe = await deps.hostKeys.engineProbe(input.nodeId);
        const after = input.since ? new Date(input.since) : reg?.registeredAt;
        if (probe && after && probe.checkedAt >= after) {
          const failed = probe.statuses.filter((s) => s.state === 'failed');
          if (failed.length) {
            throw ApplicationFailure.create({
              type: 'LLMGW_ENGINE_PROBE_FAILED' satisfies ErrorCode,
              nonRetryable: true,
              message:
                failed
                  .map(
                    (s) =>
                      `engine ${s.engine}${s.version ? ` ${s.version}` : ''} cannot run on ${input.nodeId}: ${s.reason ?? 'no reason recorded'}`,
                  )
                  .join('\n') +
                `\nfix it on the node (or in server.yaml's engines), then onboard again; llmgw ctl nodes shows the same`,
            });
          }
          const text = (state: string): string[] =>
            probe.statuses
              .filter((s) => s.state === state)
              .map(
                (s) =>
                  `${s.engine}${s.version ? ` ${s.version}` : ''}${state === 'skipped' && s.reason ? ` (${s.reason})` : ''}`,
              );
          const skipped = text('skipped');
          return {
            summary: `engines offered: ${text('offered').join(', ') || 'none'}${skipped.length ? `; not installed here: ${skipped.join('; ')}` : ''}`,
            waitedMs: Date.now() - started,
            changed: false,
          };
        }
        if (Date.now() - started > input.enginesTimeoutS * 1000) {
          throw ApplicationFailure.create({
            type: 'LLMGW_ENGINE_PROBE_FAILED' satisfies ErrorCode,
            nonRetryable: true,
            message: `no engine install and probe of ${input.nodeId} was recorded within ${input.enginesTimeoutS} s of its registration: see ${workflowIds.engines(input.nodeId)} in the Temporal UI (still installing? is the control plane up?)`,
          });
        }
        beat({
          step: 'waitEngines',
          waitingFor: `${input.nodeId} to install and probe its engines (${workflowIds.engines(input.nodeId)}, ${Math.round((Date.now() - started) / 1000)} s so far)`,
        });
        await sleep(500);
      }
    },
  };
}
