/** The gateway role: MySQL's routing table, refreshed, behind the inference API on listeners.gateway. */
import type { ServerConfig } from '../config/types';
import type { GatewayLog } from '../gateway/inference/log';
import { RoutingTable } from '../gateway/inference/routing';
import { startGateway } from '../gateway/inference/server';
import { openDatabase } from '../lib/store/db';
import { Store } from '../lib/store/store';

/** A running gateway role. */
export interface GatewayRole {
  /** `http://host:port` of the inference API */
  url: string;
  close(): Promise<void>;
}

/** Opens MySQL, loads the routing table and serves the inference API; close() stops both. One log for all of it. */
export async function startGatewayRole(opts: { config: ServerConfig; log?: GatewayLog }): Promise<GatewayRole> {
  const { config, log } = opts;
  const { gateway } = config;
  const pool = await openDatabase(config.mysql.url);
  const store = new Store(pool);
  const routing = new RoutingTable(() => store.routeRows(), { refreshMs: gateway.refreshMs, log });
  const gw = await startGateway({
    host: config.listeners.gateway.host, port: config.listeners.gateway.port, routing, apiKeys: gateway.apiKeys, log, timeouts: gateway.timeouts, accessLog: gateway.accessLog,
  }).catch(async (err: unknown) => {
    await pool.end();
    throw err;
  });
  return {
    url: gw.url,
    async close(): Promise<void> {
      await gw.close();
      await pool.end();
    },
  };
}
