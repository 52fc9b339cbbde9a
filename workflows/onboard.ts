/**
 * The onboardNode workflow (`onboard/<node>`): gives a machine its identity and agent, one activity per step on
 * llmgw-ca (the CA key and the ssh key live there). A failure names its step, why, and what to do.
 */
import { ApplicationFailure, patched, setHandler, upsertSearchAttributes } from '@temporalio/workflow';
import { searchAttributes } from '../lib/names';
import {
  DEFAULT_ENGINES_TIMEOUT_S,
  ONBOARD_STEPS,
  onboardProgressQuery,
  type OnboardInput,
  type OnboardProgress,
  type OnboardResult,
  type StepId,
  type StepProgress,
  type StepResult,
} from './contracts/onboard';
import { onboardProxies } from './proxies';
import { stepRunner, type StepFailed } from './steps';

/** Marks onboardings that wait for the node's engine install and probe after its registration. */
const ENGINES_WAIT_PATCH = 'onboard-waits-for-engines';

/** Runs the steps in order; ends when the node has registered and its engines were installed and probed. */
export async function onboardNode(input: OnboardInput): Promise<OnboardResult> {
  const progress: OnboardProgress = {
    nodeId: input.nodeId,
    steps: ONBOARD_STEPS.map((s): StepProgress => ({
      id: s.id,
      title: s.title,
      state: 'pending',
      summary: null,
      ms: null,
      waitedMs: null,
      error: null,
    })),
  };
  setHandler(onboardProgressQuery, () => progress);
  upsertSearchAttributes([{ key: searchAttributes.node, value: [input.nodeId] }]);
  const started = Date.now();
  const enginesTimeoutS = input.enginesTimeoutS ?? DEFAULT_ENGINES_TIMEOUT_S;
  const { steps, sshWait, registerWait, enginesWait } = onboardProxies({ ...input, enginesTimeoutS });

  const step = stepRunner<StepId>(progress.steps, () => `onboarding **${input.nodeId}** (${input.addr})`);
  const run = async <R extends StepResult>(id: StepId, fn: () => Promise<R>): Promise<R> => {
    try {
      return await step(id, fn);
    } catch (err) {
      const e = err as StepFailed;
      throw ApplicationFailure.create({
        type: e.type ?? 'LLMGW_ONBOARD_FAILED',
        message: `onboarding ${input.nodeId} failed at step "${e.step}": ${e.message}`,
        nonRetryable: true,
      });
    }
  };

  await run('waitForSsh', () => sshWait.waitForSsh(input));
  const key = await run('learnHostKey', () => steps.learnHostKey(input));
  const cert = await run('issueCertificate', () => steps.issueCertificate(input));
  const files = await run('install', () => steps.install(input));
  await run('probeEngines', () => steps.probeEngines(input));
  const agent = await run('startAgent', () => steps.startAgent({ ...input, restart: cert.changed || files.changed }));
  await run('waitRegistered', () => registerWait.waitRegistered({ ...input, since: agent.since }));
  // The engines server.yaml names are installed by the agent once it registered: a broken one fails onboarding here.
  if (patched(ENGINES_WAIT_PATCH))
    await run('waitEngines', () => enginesWait.waitEngines({ ...input, since: agent.since, enginesTimeoutS }));

  const totalMs = Date.now() - started;
  const waitedMs = progress.steps.reduce((n, s) => n + (s.waitedMs ?? 0), 0);
  return {
    nodeId: input.nodeId,
    steps: progress.steps,
    totalMs,
    waitedMs,
    changed: key.changed || cert.changed || files.changed || agent.changed,
  };
}
