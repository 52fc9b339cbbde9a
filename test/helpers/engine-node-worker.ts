/**
 * A node worker as its own process, so a test can SIGTERM or SIGKILL it like an agent:
 * `node --require tsx/cjs engine-node-worker.ts ADDRESS NODE_ID STATE_DIR`. Prints one JSON line per log
 * message on stdout (`{"msg":"worker running"}` once it polls). SIGTERM shuts the worker down as the agent does.
 */
import { NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { createNodeActivities } from '../../activities/node';
import { nodeQueue } from '../../lib/names';
import { simEngineArgv } from '../../lib/sim/argv';
import { NODE_WORKER_OPTIONS } from '../../workers/agent/worker';

async function main(): Promise<void> {
  const [address, nodeId, stateDir] = process.argv.slice(2);
  if (!address || !nodeId || !stateDir) throw new Error('usage: engine-node-worker ADDRESS NODE_ID STATE_DIR');
  const line = (msg: string, fields?: Record<string, unknown>): void =>
    void process.stdout.write(`${JSON.stringify({ msg, ...fields })}\n`);
  // As the agent: our SIGTERM handler, not the runtime's, starts the shutdown.
  Runtime.install({ shutdownSignals: [] });
  const connection = await NativeConnection.connect({ address });
  const worker = await Worker.create({
    ...NODE_WORKER_OPTIONS,
    connection,
    taskQueue: nodeQueue(nodeId),
    activities: createNodeActivities({
      nodeId,
      engineArgv: () => simEngineArgv(),
      stateDir,
      stopGraceMs: 3000,
      log: line,
    }),
  });
  const running = worker.run();
  process.once('SIGTERM', () => {
    line('stopping');
    worker.shutdown();
  });
  line('worker running', { pid: process.pid });
  await running;
  await connection.close();
  line('worker stopped');
  process.exit(0);
}

main().catch((err: Error) => {
  process.stderr.write(`${err.stack ?? err.message}\n`);
  process.exit(1);
});
