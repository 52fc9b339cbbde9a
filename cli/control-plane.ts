/** `llmgw control-plane`: the control plane API and the control worker, in one process. */
import { loadServerConfig } from '../config/load';
import { startControlPlane } from '../workers/control';
import { parse } from './args';
import { announceDefaultDatabase, CONFIG_HELP, installRoleRuntime, runRole, temporalMetricsOf } from './role-process';

/** `llmgw control-plane`: the control plane API and the control worker. */
export async function controlPlaneCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: `llmgw control-plane [--config FILE] [--no-apply]\n\nRuns the control plane API (agent registration, read API) and the control worker (queue llmgw-control: every workflow).\nAt start it applies server.yaml's catalog as llmgw ctl apply does (without --prune): new models deployed, changed\nreplica counts and profiles applied, every model's deployment running.\n\n  --no-apply      only record the catalog; deploy with llmgw ctl deploy / ctl apply\n${CONFIG_HELP}`,
    options: { config: { type: 'string' }, 'no-apply': { type: 'boolean' } },
  });
  await runRole(
    'control-plane',
    async (log) => {
      const config = loadServerConfig(values.config);
      installRoleRuntime(log, temporalMetricsOf(config.metrics.controlPlane));
      announceDefaultDatabase(config, log);
      const cp = await startControlPlane({ config, log, applyCatalog: !values['no-apply'] });
      log('control plane listening', {
        url: cp.url,
        door: cp.door.address,
        temporal: config.temporal.address,
        ...(cp.metricsUrl ? { metrics: cp.metricsUrl } : {}),
      });
      return cp;
    },
    { temporal: false },
  );
}
