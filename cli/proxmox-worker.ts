/** `llmgw proxmox-worker`: the llmgw-proxmox worker, the one holder of the Proxmox API token. */
import { loadServerConfig } from '../config/load';
import { QUEUES } from '../lib/names';
import { startProxmoxWorker } from '../workers/proxmox';
import { parse } from './args';
import { startProcessMetrics } from '../workers/process-metrics';
import { CONFIG_HELP, installRoleRuntime, runRole, temporalMetricsOf } from './role-process';

/** `llmgw proxmox-worker`: provisioning's activities, with the Proxmox API token. */
export async function proxmoxWorkerCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: `llmgw proxmox-worker --config FILE

Runs the llmgw-proxmox worker: the activities of provisionNode (create, grow, start and, after a failure,
remove the VMs llmgw creates). It is the only process that needs the Proxmox API token; run it where you
keep that token (server.yaml's proxmox section: url, tokenId, tokenSecretFile, ca). At start it calls the
Proxmox API once, so a wrong token, CA or address fails here, naming the fix.

${CONFIG_HELP}`,
    options: { config: { type: 'string' } },
  });
  await runRole(
    'proxmox-worker',
    async (log) => {
      const config = loadServerConfig(values.config);
      installRoleRuntime(log, temporalMetricsOf(config.metrics.proxmoxWorker));
      const w = await startProxmoxWorker({ config, log });
      log('proxmox worker running', {
        queue: QUEUES.proxmox,
        proxmox: config.proxmox?.url,
        version: w.version,
        temporal: config.temporal.address,
      });
      const metrics = await startProcessMetrics(config.metrics.proxmoxWorker);
      if (metrics) log('metrics listening', { url: metrics.url });
      return {
        close: async (): Promise<void> => {
          await w.close();
          await metrics?.close();
        },
      };
    },
    { temporal: false },
  );
}
