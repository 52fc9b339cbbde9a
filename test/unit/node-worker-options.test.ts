/**
 * The node worker's options as the SDK compiles them for its core: 2 activity polls (not the default 10). SDK 1.24
 * declares `maxConcurrentActivityTaskPolls` but never reads it; set that way, this test sees 10.
 */
import { noopMetricMeter } from '@temporalio/common';
import { DefaultLogger } from '@temporalio/worker';
import { compileWorkerOptions, toNativeWorkerOptions } from '@temporalio/worker/lib/worker-options';
import { NODE_WORKER_OPTIONS } from '../../workers/agent/worker';

test('a node worker keeps 2 activity polls open and polls no workflow tasks', () => {
  const compiled = compileWorkerOptions(
    { taskQueue: 'node-gpu-01', activities: { noop: async () => undefined }, ...NODE_WORKER_OPTIONS },
    new DefaultLogger('ERROR'),
    noopMetricMeter,
  );
  expect(compiled.activityTaskPollerBehavior).toEqual({ type: 'simple-maximum', maximum: 2 });
  expect(toNativeWorkerOptions({ ...compiled, buildId: 'test' }).activityTaskPollerBehavior).toEqual({
    type: 'simple-maximum',
    maximum: 2,
  });
});
