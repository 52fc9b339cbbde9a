/**
 * llmgw's gateway alone in a process, for `npm run bench:peers` to measure: the server `llmgw gateway` runs
 * (gateway/inference/server.ts, production defaults from server.yaml's) over a routing table of one ready replica,
 * reloaded every gateway.refreshMs as the role reloads MySQL's (a fixed table here: the query costs nothing per
 * request). Settings in PEERS_GATEWAY (JSON: upstream, model, apiKeys); prints {"ready":url}; SIGTERM closes it.
 */
import { DEFAULT_CONFIG } from '../../config/defaults';
import { makeLog } from '../../cli/log';
import { RoutingTable } from '../../gateway/inference/routing';
import { probeSlots } from '../../gateway/inference/slots';
import { startGateway } from '../../gateway/inference/server';
import { ready } from '../helpers/gateway';

interface Settings {
  upstream: string;
  model: string;
  apiKeys: string[];
}

async function main(): Promise<void> {
  const s = JSON.parse(process.env.PEERS_GATEWAY ?? '{}') as Settings;
  const { gateway } = DEFAULT_CONFIG;
  const rows = { models: [s.model], replicas: [ready(`${s.model}-0`, s.model, s.upstream)] };
  const routing = new RoutingTable(async () => rows, {
    refreshMs: gateway.refreshMs,
    defaultLimit: gateway.admission.defaultMaxConcurrent,
    probeSlots,
  });
  const gw = await startGateway({
    host: '127.0.0.1',
    port: 0,
    routing,
    apiKeys: s.apiKeys,
    log: makeLog('gateway'),
    timeouts: gateway.timeouts,
    accessLog: gateway.accessLog,
    admission: gateway.admission,
    // Measured with everything on: metrics are metered on every request even though nobody scrapes them here.
    metrics: { host: '127.0.0.1', port: 0 },
  });
  process.stdout.write(`${JSON.stringify({ ready: gw.url })}\n`);
  process.once('SIGTERM', () => void gw.close().then(() => process.exit(0)));
}

main().catch((err: Error) => {
  process.stderr.write(`peers-gateway: ${err.message}\n`);
  process.exit(1);
});
