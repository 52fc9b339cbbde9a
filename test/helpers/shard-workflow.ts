/**
 * A test-only workflow (bundled on its own, not from workflows/): runs one runShard on a node queue and returns
 * how it ended, so a test can schedule the real activity through Temporal and see its failure type.
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  TimeoutFailure,
  isCancellation,
  proxyActivities,
} from '@temporalio/workflow';
import type { NodeActivities, RunShardInput } from '../../activities/node';

export type ShardOutcome =
  | { kind: 'completed' }
  | { kind: 'cancelled' }
  | { kind: 'failed'; type: string | null | undefined; message: string; details: unknown[] }
  | { kind: 'timeout'; timeoutType: string };

/** Runs `input` on `queue` once (no retry) with a short heartbeat timeout. */
export async function runShardOnce(queue: string, input: RunShardInput): Promise<ShardOutcome> {
  const { runShard } = proxyActivities<NodeActivities>({
    taskQueue: queue,
    startToCloseTimeout: '1h',
    heartbeatTimeout: '3s',
    scheduleToStartTimeout: '60s',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { maximumAttempts: 1 },
  });
  try {
    await runShard(input);
    return { kind: 'completed' };
  } catch (err) {
    if (isCancellation(err)) return { kind: 'cancelled' };
    const cause = err instanceof ActivityFailure ? err.cause : undefined;
    if (cause instanceof ApplicationFailure)
      return { kind: 'failed', type: cause.type, message: cause.message, details: [...(cause.details ?? [])] };
    if (cause instanceof TimeoutFailure) return { kind: 'timeout', timeoutType: String(cause.timeoutType) };
    throw err;
  }
}
