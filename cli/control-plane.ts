/** `llmgw control-plane`: the control plane API and the control worker, in one process. */
import { loadServerConfig } from '../config/load';
import { startControlPlane } from '../workers/control';
import { parse } from './args';
import { announceDefaultDatabase, CONFIG_HELP, runRole } from './role-process';

/** `llmgw control-plane`: the control plane API and the control worker. */
export async function controlPlaneCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: `llmgw control-plane [--config FILE]\n\nRuns the control plane API (agent registration, read API) and the control worker (queue llmgw-control: every workflow).\n\n${CONFIG_HELP}`,
    options: { config: { type: 'string' } },
  });
  await runRole('control-plane', async (log) => {
    const config = loadServerConfig(values.config);
    announceDefaultDatabase(config, log);
    const cp = await startControlPlane({ config, log });
    log('control plane listening', { url: cp.url, door: cp.door.address, temporal: config.temporal.address });
    return cp;
  });
}
