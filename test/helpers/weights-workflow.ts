/**
 * A test-only workflow (bundled on its own): runs fetchWeights on a node queue with the retry policy recommended
 * for the replica workflow, and returns how it ended, so a test sees the result or the failure's type.
 */
import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { FetchWeightsInput, FetchWeightsResult, WeightsActivities } from '../../activities/node/weights';

export type FetchOutcome =
  | { kind: 'fetched'; result: FetchWeightsResult }
  | { kind: 'failed'; type: string | null | undefined; message: string; nonRetryable: boolean };

/** fetchWeights on `queue`: heartbeat timeout 30 s, up to 5 attempts 1 s apart (doubling). */
export async function fetchWeightsOnce(queue: string, input: FetchWeightsInput): Promise<FetchOutcome> {
  const { fetchWeights } = proxyActivities<WeightsActivities>({
    taskQueue: queue,
    startToCloseTimeout: '1h',
    scheduleToStartTimeout: '60s',
    heartbeatTimeout: '30s',
    retry: { maximumAttempts: 5, initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '1m' },
  });
  try {
    return { kind: 'fetched', result: await fetchWeights(input) };
  } catch (err) {
    const cause = err instanceof ActivityFailure ? err.cause : undefined;
    if (cause instanceof ApplicationFailure)
      return { kind: 'failed', type: cause.type, message: cause.message, nonRetryable: cause.nonRetryable === true };
    throw err;
  }
}
