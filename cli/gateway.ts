/** `llmgw gateway`: the OpenAI-compatible inference gateway. */
import { loadServerConfig } from '../config/load';
import { startGatewayRole } from '../workers/gateway';
import { parse } from './args';
import { announceDefaultDatabase, CONFIG_HELP, runRole } from './role-process';

/** `llmgw gateway`: the OpenAI-compatible inference gateway. */
export async function gatewayCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: `llmgw gateway [--config FILE]\n\nServes /v1/models, /v1/chat/completions and /v1/completions, routed to ready replicas (read from MySQL).\n\n${CONFIG_HELP}`,
    options: { config: { type: 'string' } },
  });
  // No Temporal here: the gateway serves from MySQL's routing table.
  await runRole(
    'gateway',
    async (log) => {
      const config = loadServerConfig(values.config);
      announceDefaultDatabase(config, log);
      const gw = await startGatewayRole({ config, log });
      log('gateway listening', { url: gw.url, ...(gw.metricsUrl ? { metrics: gw.metricsUrl } : {}) });
      return gw;
    },
    { temporal: false },
  );
}
