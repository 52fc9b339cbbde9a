/**
 * Following a workflow in the terminal: its steps (for onboarding, from its progress query) and what each
 * running activity heartbeats it is waiting for, until it ends. `llmgw ctl follow WORKFLOW-ID` reattaches; a
 * Ctrl-C (the abort signal) only stops following — the workflow goes on in Temporal.
 */
import type { Client, WorkflowHandle } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { temporalSdk } from './temporal';
import type { QueryDefinition } from '@temporalio/common';
import { onboardProgressQuery, type OnboardHeartbeat, type OnboardResult } from '../workflows/contracts/onboard';
import { provisionProgressQuery, type ProvisionResult, type StepLine } from '../workflows/contracts/provision';
import { removeNodeProgressQuery, type RemoveNodeResult } from '../workflows/contracts/remove-node';

export interface FollowOptions {
  out: (s: string) => void;
  /** aborted: stop following (the workflow goes on) */
  signal?: AbortSignal;
  pollMs?: number;
}

/** A running activity as `describe` shows it, with what it heartbeat last. */
interface Pending {
  type: string;
  attempt: number;
  details: unknown;
  lastFailure: string | null;
}

async function pendingActivities(
  handle: WorkflowHandle,
): Promise<{ status: string; type: string; pending: Pending[] }> {
  const d = await handle.describe();
  const pending = (d.raw.pendingActivities ?? []).map((p): Pending => {
    const payload = p.heartbeatDetails?.payloads?.[0];
    let details: unknown = null;
    try {
      details = payload
        ? defaultPayloadConverter.fromPayload(payload as Parameters<typeof defaultPayloadConverter.fromPayload>[0])
        : null;
    } catch {
      details = null;
    }
    return {
      type: p.activityType?.name ?? '?',
      attempt: p.attempt ?? 1,
      details,
      lastFailure: p.lastFailure?.message ?? null,
    };
  });
  return { status: d.status.name, type: d.type, pending };
}

const secs = (ms: number | null): string => (ms === null ? '' : `${(ms / 1000).toFixed(1)} s`);

/** The line for a step that finished or failed. */
export function formatStep(s: StepLine): string {
  if (s.state === 'done') return `  ✓ ${s.title} (${secs(s.ms)}): ${s.summary ?? ''}`;
  if (s.state === 'failed') return `  ✗ ${s.title} (${secs(s.ms)}): failed`;
  if (s.state === 'running') return `  … ${s.title}`;
  return `    ${s.title}`;
}

/** What an activity's heartbeat says it waits for (onboarding's steps heartbeat { step, waitingFor }). */
function waitingFor(p: Pending): string {
  const d = p.details as Partial<OnboardHeartbeat> | null;
  const what = d && typeof d.waitingFor === 'string' ? d.waitingFor : d === null ? '' : JSON.stringify(d);
  const retry =
    p.attempt > 1 ? ` [attempt ${p.attempt}${p.lastFailure ? `, last failure: ${p.lastFailure}` : ''}]` : '';
  return what || retry ? `      waiting for: ${what || p.type}${retry}` : '';
}

const pause = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((r) => {
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      r();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/**
 * Follows onboarding `handle` step by step until it ends: resolves with its result, 'detached' when the signal
 * stopped following, or throws its failure (whose message names the step, why and what to do).
 */
export function followOnboarding(handle: WorkflowHandle, o: FollowOptions): Promise<OnboardResult | 'detached'> {
  return followSteps<OnboardResult>(handle, onboardProgressQuery, o);
}

/** The same for provisioning (`provision/<node>`). */
export function followProvisioning(handle: WorkflowHandle, o: FollowOptions): Promise<ProvisionResult | 'detached'> {
  return followSteps<ProvisionResult>(handle, provisionProgressQuery, o);
}

/** The same for a node's removal (`remove-node/<node>`). */
export function followRemoval(handle: WorkflowHandle, o: FollowOptions): Promise<RemoveNodeResult | 'detached'> {
  return followSteps<RemoveNodeResult>(handle, removeNodeProgressQuery, o);
}

/** A workflow whose progress query lists steps, followed step by step with what each running activity waits for. */
async function followSteps<R extends { steps: StepLine[] }>(
  handle: WorkflowHandle,
  query: QueryDefinition<{ steps: StepLine[] }, []>,
  o: FollowOptions,
): Promise<R | 'detached'> {
  const printed = new Map<string, string>();
  let lastWait = '';
  for (;;) {
    if (o.signal?.aborted) return 'detached';
    const progress = await handle.query(query).catch(() => null);
    for (const s of progress?.steps ?? []) {
      const line = s.state === 'pending' ? '' : formatStep(s);
      if (line && printed.get(s.id) !== line) {
        o.out(`${line}\n`);
        printed.set(s.id, line);
        lastWait = '';
      }
    }
    const d = await pendingActivities(handle).catch(() => null);
    for (const p of d?.pending ?? []) {
      const line = waitingFor(p);
      if (line && line !== lastWait) o.out(`${line}\n`);
      lastWait = line || lastWait;
    }
    if (d && d.status !== 'RUNNING') break;
    await pause(o.pollMs ?? 500, o.signal);
  }
  try {
    const r = (await handle.result()) as R;
    for (const s of r.steps) if (printed.get(s.id) !== formatStep(s)) o.out(`${formatStep(s)}\n`);
    return r;
  } catch (err) {
    throw new Error(failureMessage(err));
  }
}

/** A workflow failure's own message (its cause's), not the client's wrapper text. */
export function failureMessage(err: unknown): string {
  if (err instanceof temporalSdk().WorkflowFailedError) return err.cause?.message ?? err.message;
  return (err as Error).message;
}

/** `llmgw ctl follow WORKFLOW-ID`: onboarding step by step; any other workflow by its running activities. */
export async function followWorkflow(
  client: Client,
  workflowId: string,
  o: FollowOptions & { uiLink: string },
): Promise<void> {
  const handle = client.workflow.getHandle(workflowId);
  const first = await pendingActivities(handle).catch((err: Error) => {
    throw new Error(`no workflow ${workflowId} (${err.message}): see the Temporal UI for the id, e.g. onboard/NODE`);
  });
  o.out(`workflow ${workflowId} (${first.type}, ${first.status.toLowerCase()})\n  ${o.uiLink}\n`);
  if (first.type === 'onboardNode') {
    const r = await followOnboarding(handle, o);
    o.out(r === 'detached' ? detachedLine(workflowId) : `${onboardedLine(r)}\n`);
    return;
  }
  if (first.type === 'provisionNode') {
    const r = await followProvisioning(handle, o);
    o.out(r === 'detached' ? detachedLine(workflowId) : `${provisionedLine(r)}\n`);
    return;
  }
  let last = '';
  for (;;) {
    if (o.signal?.aborted) return void o.out(detachedLine(workflowId));
    const d = await pendingActivities(handle);
    const line = d.pending.map((p) => `  ${p.type}${waitingFor(p).replace(/^ +waiting for:/, ':')}`).join('\n');
    if (line && line !== last) o.out(`${line}\n`);
    last = line || last;
    if (d.status !== 'RUNNING') {
      o.out(`${workflowId}: ${d.status.toLowerCase()}\n`);
      if (d.status === 'FAILED')
        await handle.result().catch((err: unknown) => void o.out(`  ${failureMessage(err)}\n`));
      return;
    }
    await pause(o.pollMs ?? 1000, o.signal);
  }
}

/** What a Ctrl-C prints. */
export function detachedLine(workflowId: string): string {
  return `detached: ${workflowId} goes on in Temporal; follow it again with llmgw ctl follow ${workflowId}\n`;
}

/** The last line of a finished onboarding, with its time split into llmgw's own work and waiting on the node. */
export function onboardedLine(r: OnboardResult): string {
  return (
    `${r.nodeId} onboarded${r.changed ? '' : ' (nothing changed: it already was)'} in ${secs(r.totalMs)}: ` +
    `${secs(r.waitedMs)} waiting on the node, ${secs(r.totalMs - r.waitedMs)} llmgw's own work; llmgw ctl nodes lists it`
  );
}

/** The last line of a finished provisioning. */
export function provisionedLine(r: ProvisionResult): string {
  return `${r.nodeId} provisioned: VM ${r.vmid} runs at ${r.address} (${secs(r.totalMs)}: ${secs(r.waitedMs)} waiting on Proxmox and the VM)`;
}
