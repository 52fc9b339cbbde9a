/**
 * The gateway role: MySQL's routing table, refreshed, behind the inference API on listeners.gateway; its in-flight
 * report, and its per-model request counts and TTFT for the cluster page.
 */
import { readFileSync } from 'node:fs';
import type { ServerConfig } from '../config/types';
import { doorAgentFromFiles, type DoorAgent } from '../lib/door-agent';
import { LlmgwError } from '../lib/errors';
import type { GatewayLog } from '../gateway/inference/log';
import { InflightReporter, newGatewayId } from '../gateway/inference/inflight-report';
import { KeyTable } from '../gateway/inference/keys';
import { ModelStats } from '../gateway/inference/model-stats';
import { QuotaKeeper } from '../gateway/inference/quota';
import { RoutingTable } from '../gateway/inference/routing';
import { RoutePush } from '../gateway/inference/route-push';
import { probeSlots } from '../gateway/inference/slots';
import { startGateway } from '../gateway/inference/server';
import { StatsReporter } from '../gateway/inference/stats-report';
import { openConfiguredDatabase } from '../lib/store/db';
import { DrainStore } from '../lib/store/drain';
import { KeyStore } from '../lib/store/keys';
import { ModelStatsStore } from '../lib/store/model-stats';
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

/** The control planes a gateway subscribes to: gateway.controlPlanes, else listeners.controlPlane. */
export function controlPlaneUrls(config: ServerConfig): string[] {
  if (config.gateway.controlPlanes.length) return config.gateway.controlPlanes;
  const { host, port } = config.listeners.controlPlane;
  // A wildcard listener is reached on loopback from the same host.
  const h = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  return [`https://${h}:${port}`];
}

/**
 * Route push when the gateway has its certificate (tls.gatewayCert/gatewayKey), else null: it polls MySQL every
 * refreshMs as before, and says so once, with the fix.
 */
function routePush(
  config: ServerConfig,
  routing: RoutingTable,
  log: GatewayLog | undefined,
  onApplied: () => void,
): RoutePush | null {
  const { tls } = config;
  const read = (file: string): string | null => {
    try {
      return readFileSync(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw new LlmgwError(
        'LLMGW_CONFIG_INVALID',
        `cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? String(err)}): fix its permissions, or remove it to poll MySQL instead of route push`,
        { file },
      );
    }
  };
  const certPem = read(tls.gatewayCert);
  const keyPem = read(tls.gatewayKey);
  const caPem = read(tls.ca);
  if (!certPem || !keyPem || !caPem) {
    const missing = [!certPem && tls.gatewayCert, !keyPem && tls.gatewayKey, !caPem && tls.ca].filter(Boolean);
    log?.('route push off: the routing table is re-read from MySQL every gateway.refreshMs', {
      level: 'warn',
      missing,
      refreshMs: config.gateway.refreshMs,
      fix: 'issue a gateway certificate with llmgw ca issue --gateway NAME and point tls.gatewayCert/gatewayKey at it',
    });
    return null;
  }
  return new RoutePush({
    table: routing,
    urls: controlPlaneUrls(config),
    tls: { caPem, certPem, keyPem },
    refreshMs: config.gateway.refreshMs,
    onApplied,
    ...(log ? { log } : {}),
  });
}

/** The keep-alive pool to the nodes' doors from server.yaml tls.gatewayCert/gatewayKey, or undefined (logged) when absent. */
function gatewayDoorAgent(config: ServerConfig, log?: GatewayLog): DoorAgent | undefined {
  const agent = doorAgentFromFiles(config.tls, config.gateway.timeouts.connectMs, {
    keepAliveMsecs: 30_000,
    scheduling: 'lifo',
  });
  if (!agent)
    log?.("no gateway certificate: replicas behind a node's door cannot be routed to", {
      level: 'warn',
      gatewayCert: config.tls.gatewayCert,
      fix: 'llmgw ca issue --gateway NAME, then point server.yaml tls.gatewayCert/gatewayKey at it',
    });
  return agent ?? undefined;
}

/** Opens MySQL, loads the routing table, serves the inference API and reports its in-flight requests; close() stops all. One log for all of it. */
export async function startGatewayRole(opts: { config: ServerConfig; log?: GatewayLog }): Promise<GatewayRole> {
  const { config, log } = opts;
  const { gateway } = config;
  const pool = await openConfiguredDatabase(config.mysql, 'gateway');
  const store = new Store(pool);
  // The gateway certificate (role gateway) opens the nodes' doors; without one, only plain http routes are usable.
  const doorAgent = gatewayDoorAgent(config, log);
  const routing = new RoutingTable(() => store.routeRows(), {
    refreshMs: gateway.refreshMs,
    log,
    defaultLimit: gateway.admission.defaultMaxConcurrent,
    probeSlots: (r) => probeSlots(r, doorAgent),
  });
  const drains = new DrainStore(pool);
  const gatewayId = newGatewayId();
  const logOpt = opts.log ? { log: opts.log } : {};
  // Written as soon as a pushed change is applied, so the control plane (ctl deploy) sees what this gateway routes.
  const reporter = new InflightReporter({ source: routing, sink: drains, gatewayId, ...logOpt });
  const push = routePush(config, routing, log, () => reporter.poke());
  // Keys from MySQL (and server.yaml's static ones): no key, no inference. Changes are read every quarter second.
  const keyStore = new KeyStore(pool);
  const keys = new KeyTable((since) => keyStore.changedSince(since), { staticKeys: gateway.apiKeys, log });
  const quota = new QuotaKeeper(keyStore, { log });
  const stats = new ModelStats();
  // startGateway loads the table and keeps it current: by push when the gateway has its certificate.
  const gw = await startGateway({
    host: config.listeners.gateway.host,
    port: config.listeners.gateway.port,
    routing,
    apiKeys: gateway.apiKeys,
    keys,
    quota,
    log,
    timeouts: gateway.timeouts,
    accessLog: gateway.accessLog,
    corsOrigins: gateway.corsOrigins,
    stats,
    admission: gateway.admission,
    metrics: config.metrics.gateway,
    ...(push ? { routeSource: push } : {}),
    doorAgent,
  }).catch(async (err: unknown) => {
    doorAgent?.destroy();
    await pool.end();
    throw err;
  });
  await drains.pruneGateways(FORGET_GATEWAYS_AFTER_MS).catch(() => 0);
  reporter.start();
  const statsReporter = new StatsReporter({ stats, sink: new ModelStatsStore(pool), gatewayId, ...logOpt });
  statsReporter.start();
  return {
    url: gw.url,
    metricsUrl: gw.metricsUrl,
    async close(): Promise<void> {
      // The server first: its in-flight requests finish while they are still reported.
      await gw.close();
      doorAgent?.destroy();
      await reporter.stop();
      await statsReporter.stop();
      await pool.end();
    },
  };
}
