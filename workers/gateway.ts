/** The gateway role: MySQL's routing table, refreshed, behind the inference API on listeners.gateway; its in-flight report. */
import type { ServerConfig } from '../config/types';
import type { GatewayLog } from '../gateway/inference/log';
import { InflightReporter } from '../gateway/inference/inflight-report';
import { RoutingTable } from '../gateway/inference/routing';
import { probeSlots } from '../gateway/inference/slots';
import { startGateway } from '../gateway/inference/server';
import { openDatabase } from '../lib/store/db';
import { DrainStore } from '../lib/store/drain';
import { Store } from '../lib/store/store';

/** Rows of gateways silent this long are removed when a gateway starts (a row is a few hundred bytes; restarts add one each). */
const FORGET_GATEWAYS_AFTER_MS = 24 * 3600_000;

/** A running gateway role. */
export interface GatewayRole {
  /** `http://host:port` of the inference API */
  url: string;
  /** `http://host:port/metrics` when server.yaml's metrics.gateway is set */
  metricsUrl: string | null;
  close(): Promise<void>;
}

/** Opens MySQL, loads the routing table, serves the inference API and reports its in-flight requests; close() stops all. One log for all of it. */
export async function startGatewayRole(opts: { config: ServerConfig; log?: GatewayLog }): Promise<GatewayRole> {
  const { config, log } = opts;
  const { gateway } = config;
  const pool = await openDatabase(config.mysql.url);
  const store = new Store(pool);
  const routing = new RoutingTable(() => store.routeRows(), {
    refreshMs: gateway.refreshMs,
    log,
    defaultLimit: gateway.admission.defaultMaxConcurrent,
    probeSlots,
  });
  const gw = await startGateway({
    host: config.listeners.gateway.host,
    port: config.listeners.gateway.port,
    routing,
    apiKeys: gateway.apiKeys,
    log,
    timeouts: gateway.timeouts,
    accessLog: gateway.accessLog,
    corsOrigins: gateway.corsOrigins,
    admission: gateway.admission,
    metrics: config.metrics.gateway,
  }).catch(async (err: unknown) => {
    await pool.end();
    throw err;
  });
  const drains = new DrainStore(pool);
  await drains.pruneGateways(FORGET_GATEWAYS_AFTER_MS).catch(() => 0);
  const reporter = new InflightReporter({ source: routing, sink: drains, ...(opts.log ? { log: opts.log } : {}) });
  reporter.start();
  return {
    url: gw.url,
    metricsUrl: gw.metricsUrl,
    async close(): Promise<void> {
      // The server first: its in-flight requests finish while they are still reported.
      await gw.close();
      await reporter.stop();
      await pool.end();
    },
  };
}
