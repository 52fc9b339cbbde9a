/** Per test file: the Temporal runtime logs warnings only, so test output shows what failed. */
import { DefaultLogger, Runtime } from '@temporalio/worker';

try {
  Runtime.install({ logger: new DefaultLogger('WARN') });
} catch {
  // already installed in this worker
}
