/** `llmgw control-plane`: the control plane API and the control worker, in one process. */
import { loadServerConfig } from '../config/load';
import { startControlPlane } from '../workers/control';
import { parse } from './args';
import { makeLog } from './log';
import { announceDefaultDatabase, CONFIG_HELP, ownSignals, untilSignal } from './role-process';

/** `llmgw control-plane`: the control plane API and the control worker. */
export async function controlPlaneCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: `llmgw control-plane [--config FILE]\n\nRuns the control plane API (agent registration, read API) and the control worker (queue llmgw-control: every workflow).\n\n${CONFIG_HELP}`,
    options: { config: { type: 'string' } },
  });
  const config = loadServerConfig(values.config);
  const log = makeLog('control-plane');
  announceDefaultDatabase(config, log);
  ownSignals();
  const cp = await startControlPlane({ config, log });
  log('control plane listening', { url: cp.url, temporal: config.temporal.address });
  await untilSignal(() => cp.close());
}
