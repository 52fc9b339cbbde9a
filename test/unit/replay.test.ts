/**
 * Determinism guard: the workflow code of today must replay the histories recorded from a real run
 * (test/fixtures/histories, written by `LLMGW_RECORD_HISTORIES=1 npx jest test/integration/replica.test.ts`,
 * `… drain-cancel.test.ts`, `… catalog-apply.test.ts`, `… remove-node.test.ts` and `… llama-multinode.test.ts`).
 * A change that alters the command sequence of a running workflow fails here with a DeterminismViolationError;
 * such a change needs `patched()` (see docs/development.md), not a new recording.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from '@temporalio/worker';
import { workflowBundlePath } from '../helpers/bundle';

const HISTORIES = join(__dirname, '../fixtures/histories');
/** What each recording must contain for its replay to mean something. */
const COVERS: Record<string, string[]> = {
  // placed, a shard died (rebuild), stopped with its shards cancelled, finished
  'replica-pair-0.json': [
    'ACTIVITY_TASK_FAILED',
    'ACTIVITY_TASK_CANCELED',
    'WORKFLOW_EXECUTION_SIGNALED',
    'WORKFLOW_EXECUTION_COMPLETED',
  ],
  // started its child, took a scale update, saw the child finish (the deployment itself runs on)
  'model-pair.json': [
    'START_CHILD_WORKFLOW_EXECUTION_INITIATED',
    'WORKFLOW_EXECUTION_UPDATE_COMPLETED',
    'CHILD_WORKFLOW_EXECUTION_COMPLETED',
  ],
  // (test/integration/drain-cancel.test.ts) a drain cancelled while its replacement waited: it withdrew the replacement
  'drain-cancelled.json': [
    'MARKER_RECORDED',
    'WORKFLOW_EXECUTION_CANCEL_REQUESTED',
    'SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED',
    'WORKFLOW_EXECUTION_CANCELED',
  ],
  // a drain told --allow-downtime while it waited (its long-poll cancelled), which moved the replica stop-first
  'drain-stop-first.json': [
    'MARKER_RECORDED',
    'WORKFLOW_EXECUTION_SIGNALED',
    'ACTIVITY_TASK_CANCEL_REQUESTED',
    'WORKFLOW_EXECUTION_COMPLETED',
  ],
  // a replica stopped through the in-flight wait (the patch marker, then waitInflight), its shards cancelled
  'replica-stop-first.json': [
    'MARKER_RECORDED',
    'WORKFLOW_EXECUTION_SIGNALED',
    'ACTIVITY_TASK_CANCELED',
    'WORKFLOW_EXECUTION_COMPLETED',
  ],
  // (catalog-apply.test.ts) a deployment told its spec changed, which rolled its replica make-before-break
  'model-rolled.json': [
    'WORKFLOW_EXECUTION_SIGNALED',
    'START_CHILD_WORKFLOW_EXECUTION_INITIATED',
    'SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED',
  ],
  // a deployment retired by ctl apply --prune: its replica stopped, the model forgotten, the workflow ended
  'model-retired.json': ['WORKFLOW_EXECUTION_SIGNALED', 'ACTIVITY_TASK_COMPLETED', 'WORKFLOW_EXECUTION_COMPLETED'],
  // (remove-node.test.ts) a node drained by its child drain, its agent stopped, revoked, forgotten, its VM removed
  'remove-node.json': ['CHILD_WORKFLOW_EXECUTION_COMPLETED', 'ACTIVITY_TASK_COMPLETED', 'WORKFLOW_EXECUTION_COMPLETED'],
  // (replica.test.ts, after the stop-shard-by-activity patch) a rank died and the rebuild stopped the other with
  // stopShard; then stopped, rank 0 first, each runShard completing after its stopShard
  'replica-stop-shard.json': [
    'MARKER_RECORDED',
    'ACTIVITY_TASK_FAILED',
    'ACTIVITY_TASK_COMPLETED',
    'WORKFLOW_EXECUTION_SIGNALED',
    'WORKFLOW_EXECUTION_COMPLETED',
  ],
  // (llama-multinode.test.ts) llama.cpp over two nodes: rank 0 started after waitListening, a worker killed, rebuilt
  'replica-workers-first.json': ['MARKER_RECORDED', 'ACTIVITY_TASK_FAILED', 'ACTIVITY_TASK_COMPLETED'],
};
/** Activities a recording must schedule, where its event types alone do not show the path. */
const SCHEDULES: Record<string, string[]> = {
  'replica-stop-shard.json': ['runShard', 'stopShard'],
};
const files = readdirSync(HISTORIES)
  .filter((f) => f.endsWith('.json'))
  .sort();

describe('recorded workflow histories replay on the current code', () => {
  test('fixtures exist for the replica, the model deployment, the drain and the node removal workflows', () => {
    expect(files).toEqual(expect.arrayContaining(Object.keys(COVERS)));
  });

  test.each(files)('%s replays without a determinism violation', async (file) => {
    const history: unknown = JSON.parse(readFileSync(join(HISTORIES, file), 'utf8'));
    const types = (history as { events: { eventType: string }[] }).events.map((e) =>
      e.eventType.replace('EVENT_TYPE_', ''),
    );
    // A recording proves only the paths it took: each must hold the interesting ones.
    expect(types).toEqual(expect.arrayContaining(COVERS[file] ?? []));
    const scheduled = (
      history as { events: { activityTaskScheduledEventAttributes?: { activityType?: { name?: string } } }[] }
    ).events.map((e) => e.activityTaskScheduledEventAttributes?.activityType?.name);
    expect(scheduled).toEqual(expect.arrayContaining(SCHEDULES[file] ?? []));
    await Worker.runReplayHistory(
      { workflowBundle: { codePath: await workflowBundlePath() } },
      history,
      file.replace(/\.json$/, ''),
    );
  });
});
