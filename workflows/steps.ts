/**
 * The step runner onboardNode and provisionNode share: each step's state, summary, time and waiting kept in the
 * workflow's progress (its query) and shown in the Temporal UI's current details as it goes.
 */
import { ActivityFailure, ApplicationFailure, ChildWorkflowFailure, setCurrentDetails } from '@temporalio/workflow';
import type { StepResult } from './contracts/onboard';
import type { StepLine } from './contracts/provision';

/** The failure's own message and type, out of Temporal's wrappers. */
export function failureCause(err: unknown): { message: string; type: string | null } {
  const c = err instanceof ActivityFailure || err instanceof ChildWorkflowFailure ? err.cause : err;
  if (c instanceof ApplicationFailure) return { message: c.message, type: c.type ?? null };
  return { message: c instanceof Error ? c.message : String(c), type: null };
}

/** A step that failed: its title, and the activity's own message and type. */
export class StepFailed extends Error {
  constructor(
    readonly step: string,
    message: string,
    readonly type: string | null,
  ) {
    super(message);
  }
}

/**
 * A runner over `steps`: `run(id, fn)` marks the step running, then done with the activity's summary and
 * waiting, or failed with its error (then throws StepFailed). `heading` is the UI's first line.
 */
export function stepRunner<Id extends string>(
  steps: StepLine[],
  heading: () => string,
): <R extends StepResult>(id: Id, fn: () => Promise<R>) => Promise<R> {
  const show = (): void =>
    setCurrentDetails(
      `${heading()}\n\n${steps
        .map(
          (s) =>
            `- ${s.state === 'done' ? '✓' : s.state === 'failed' ? '✗' : s.state === 'running' ? '…' : ' '} ${s.title}${s.summary ? `: ${s.summary}` : ''}${s.error ? `: ${s.error}` : ''}`,
        )
        .join('\n')}`,
    );
  return async (id, fn) => {
    const step = steps.find((s) => s.id === id)!;
    step.state = 'running';
    show();
    const t = Date.now();
    try {
      const r = await fn();
      Object.assign(step, { state: 'done', summary: r.summary, ms: Date.now() - t, waitedMs: r.waitedMs });
      show();
      return r;
    } catch (err) {
      const c = failureCause(err);
      Object.assign(step, { state: 'failed', ms: Date.now() - t, error: c.message });
      show();
      throw new StepFailed(step.title, c.message, c.type);
    }
  };
}
