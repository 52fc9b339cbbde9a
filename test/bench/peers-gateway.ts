/**
 * llmgw's gateway alone in a process, for `npm run bench:peers` and `bench:routing` to measure: the server `llmgw
 * gateway` runs (gateway/inference/server.ts, production defaults from server.yaml's) over a routing table of ready
 * replicas (one per upstream, routed as `routing` says),
 * reloaded every gateway.refreshMs as the role reloads MySQL's (a fixed table here: the query costs nothing per
 * request). Everything the role runs on a request is on: the key is a stored key (scope, rpm and tpm) checked by the
 * key table, its quota taken from leases (answered in memory here: leasing from MySQL is off the request path, so
 * what is measured is the per-request check), admission, Prometheus metrics and the cluster page's model stats.
 * Settings in PEERS_GATEWAY (JSON: upstreams, model, apiKeys — the first is the stored key —, routing); prints
 * {"ready":url,"metrics":url};
 * SIGTERM closes it.
 */
import { DEFAULT_CONFIG } from '../../config/defaults';
import { makeLog } from '../../cli/log';
import { KeyTable } from '../../gateway/inference/keys';
import { ModelStats } from '../../gateway/inference/model-stats';
import { QuotaKeeper } from '../../gateway/inference/quota';
import { RoutingTable } from '../../gateway/inference/routing';
import { probeSlots } from '../../gateway/inference/slots';
import { startGateway } from '../../gateway/inference/server';
import { keyDigest } from '../../lib/api-keys';
import type { ModelRouting } from '../../lib/types';
import { ready } from '../helpers/gateway';

interface Settings {
  upstreams: string[];
  model: string;
  apiKeys: string[];
  routing?: ModelRouting;
}

async function main(): Promise<void> {
  const s = JSON.parse(process.env.PEERS_GATEWAY ?? '{}') as Settings;
  const { gateway } = DEFAULT_CONFIG;
  const rows = {
    models: [s.model],
    replicas: s.upstreams.map((u, i) => ready(`${s.model}-${i}`, s.model, u)),
    ...(s.routing ? { routing: { [s.model]: s.routing } } : {}),
  };
  const routing = new RoutingTable(async () => rows, {
    refreshMs: gateway.refreshMs,
    defaultLimit: gateway.admission.defaultMaxConcurrent,
    probeSlots,
  });
  const [key] = s.apiKeys;
  if (!key) throw new Error('PEERS_GATEWAY.apiKeys: one key, the stored key requests come with');
  const record = {
    id: 1,
    name: 'bench',
    digest: keyDigest(key),
    models: [s.model],
    rpm: 1e9,
    tpm: 2e9,
    expiresAt: null,
    revoked: false,
  };
  const keys = new KeyTable(async () => ({ keys: [record], now: new Date() }), { refreshMs: 250 });
  const quota = new QuotaKeeper({
    lease: async (a) => ({ requests: a.wantRequests, tokens: a.wantTokens, requestsLeft: 1e9, tokensLeft: 2e9 }),
    charge: async () => undefined,
    addUsage: async () => undefined,
    pruneQuota: async () => 0,
  });
  const gw = await startGateway({
    host: '127.0.0.1',
    port: 0,
    routing,
    apiKeys: [],
    keys,
    quota,
    stats: new ModelStats(),
    log: makeLog('gateway'),
    timeouts: gateway.timeouts,
    accessLog: gateway.accessLog,
    admission: gateway.admission,
    // Measured with everything on: metrics are metered on every request even though nobody scrapes them here.
    metrics: { host: '127.0.0.1', port: 0 },
  });
  process.stdout.write(`${JSON.stringify({ ready: gw.url, metrics: gw.metricsUrl })}\n`);
  process.once('SIGTERM', () => void gw.close().then(() => process.exit(0)));
}

main().catch((err: Error) => {
  process.stderr.write(`peers-gateway: ${err.message}\n`);
  process.exit(1);
});
