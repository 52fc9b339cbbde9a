/**
 * Test-only workflows (bundled on their own, not from workflows/) that schedule activities on a node's queue, for
 * the Temporal door's tests and bench: what crosses the door is then exactly one node worker's traffic.
 */
import { proxyActivities } from '@temporalio/workflow';

/** The activity a door test's node worker offers. */
export interface EchoActivities {
  echo(s: string): Promise<string>;
}

/** Runs `count` echo activities one after another on `queue`; returns the last answer. */
export async function echoOnNode(queue: string, input: string, count = 1): Promise<string> {
  const { echo } = proxyActivities<EchoActivities>({
    taskQueue: queue,
    startToCloseTimeout: '2m',
    scheduleToStartTimeout: '2m',
    retry: { maximumAttempts: 3, initialInterval: '200ms' },
  });
  let out = '';
  for (let i = 0; i < count; i++) out = await echo(`${input}#${i}`);
  return out;
}
