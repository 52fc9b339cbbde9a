/**
 * Removing a node, on llmgw-ca (which holds the ssh key that started its agent): stopping the agent for good over
 * ssh — systemd's unit disabled and stopped, or the start script's stop where there is no systemd — so nothing
 * starts it again and it stops reporting — and then the node's door, which outlives the agent by design (a unit's
 * KillMode=process leaves it running). Its engines were stopped by the drain before.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { ErrorCode } from '../../lib/errors';
import { NODE_PATHS } from '../../lib/onboard/plan';
import { SshConnectError } from '../../lib/ssh/client';
import type { HostKeyStore } from '../../lib/store/host-keys';
import type { StepResult } from '../../workflows/contracts/onboard';
import { knownHostSsh, type SshTarget } from './connect';

/**
 * Disables and stops the agent's unit, or stops it through its start script, then its node door (the pid its record
 * names, when that process is a node door: SIGTERM, it answers what is in flight and exits; SIGKILL after 30 s);
 * says in one line what it found.
 */
export const STOP_AGENT = [
  `if test -d /run/systemd/system && systemctl cat ${NODE_PATHS.unitName} >/dev/null 2>&1; then`,
  `  systemctl disable --now ${NODE_PATHS.unitName} || exit $?`,
  `  said="systemd unit ${NODE_PATHS.unitName} disabled and stopped"`,
  `elif test -x ${NODE_PATHS.service}; then ${NODE_PATHS.service} stop; said="no systemd: ${NODE_PATHS.service} stop"`,
  'else said="no llmgw agent installed"; fi',
  `pid=$(sed -n 's/.*"pid":\\([0-9][0-9]*\\).*/\\1/p' ${NODE_PATHS.doorRecord} 2>/dev/null)`,
  `if [ -n "$pid" ] && tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -q ' node-door '; then`,
  '  kill "$pid"; i=0',
  '  while kill -0 "$pid" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.2; i=$((i + 1)); done',
  '  kill -9 "$pid" 2>/dev/null; said="$said; its node door stopped (pid $pid)"',
  'fi',
  'echo "$said"',
].join('\n');

/** Builds the removal activities of llmgw-ca. */
export function createOffboardActivities(deps: { hostKeys: HostKeyStore }) {
  const { connect } = knownHostSsh(deps.hostKeys);
  return {
    /**
     * Stops the node's agent for good. A node that cannot be reached fails the step (LLMGW_SSH_UNREACHABLE) unless
     * `optional` (--force, or its VM goes next): then it is said and skipped. A node llmgw never onboarded is skipped.
     */
    async stopAgent(input: SshTarget & { optional: boolean }): Promise<StepResult> {
      // Not onboarded over ssh by llmgw (no host key learned): its agent was started by someone else, who stops it.
      if ((await deps.hostKeys.list(input.nodeId)).length === 0) {
        return {
          summary:
            "not stopped: llmgw never onboarded it over ssh (no host key recorded), so its agent is not llmgw's to stop; its certificate is revoked next",
          waitedMs: 0,
          changed: false,
        };
      }
      Context.current().heartbeat({
        step: 'stopAgent',
        waitingFor: `ssh ${input.sshUser}@${input.addr}:${input.sshPort}`,
      });
      let r;
      try {
        r = await connect(input);
      } catch (err) {
        if (!(err instanceof SshConnectError)) throw err;
        if (input.optional)
          return {
            summary: `not stopped: ${input.addr} cannot be reached (${err.message})`,
            waitedMs: 0,
            changed: false,
          };
        throw ApplicationFailure.create({
          type: 'LLMGW_SSH_UNREACHABLE' satisfies ErrorCode,
          nonRetryable: true,
          message: `cannot reach ${input.nodeId} at ${input.addr}:${input.sshPort} to stop its agent (${err.message}): pass --addr if it moved, or --force to remove it without stopping the agent (its certificate is revoked next, so it cannot connect again)`,
        });
      }
      try {
        const res = await r.sh(STOP_AGENT, { timeoutMs: 60_000 });
        const said = `${res.stdout}\n${res.stderr}`.trim().split('\n').filter(Boolean).pop() ?? '';
        if (res.code !== 0)
          throw ApplicationFailure.nonRetryable(
            `stopping the agent on ${input.nodeId} failed (exit ${res.code}): ${said}`,
            'LLMGW_ONBOARD_FAILED' satisfies ErrorCode,
          );
        return { summary: said, waitedMs: r.waitedMs(), changed: !said.startsWith('no llmgw agent') };
      } finally {
        r.close();
      }
    },
  };
}

/** The removal activities' type, for the workflow's proxies. */
export type OffboardActivities = ReturnType<typeof createOffboardActivities>;
