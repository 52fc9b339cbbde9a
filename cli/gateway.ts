/** `llmgw gateway`: the OpenAI-compatible inference gateway. */
import { loadServerConfig } from '../config/load';
import { startGatewayRole } from '../workers/gateway';
import { parse } from './args';
import { makeLog } from './log';
import { announceDefaultDatabase, CONFIG_HELP, untilSignal } from './role-process';

/** `llmgw gateway`: the OpenAI-compatible inference gateway. */
export async function gatewayCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: `llmgw gateway [--config FILE]\n\nServes /v1/models, /v1/chat/completions and /v1/completions, routed to ready replicas (read from MySQL).\n\n${CONFIG_HELP}`,
    options: { config: { type: 'string' } },
  });
  const config = loadServerConfig(values.config);
  const log = makeLog('gateway');
  announceDefaultDatabase(config, log);
  const gw = await startGatewayRole({ config, log });
  log('gateway listening', { url: gw.url });
  await untilSignal(() => gw.close());
}
