/** Runs the inference gateway: fastify with logging, timeouts for long streams, graceful close, and `listen`. */
import Fastify from 'fastify';
import { buildGatewayApp } from './app';
import type { RoutingTable } from './routing';

/** Where and what the gateway serves. */
export interface GatewayServerOptions {
  host: string;
  /** 0 = any free port (see the returned url) */
  port: number;
  routing: RoutingTable;
  apiKeys: string[];
  /** fastify's request log; off by default because it costs on every request. */
  logger?: boolean;
}

/** A listening gateway. */
export interface RunningGateway {
  /** `http://host:port` */
  url: string;
  /** Stops accepting connections, lets in-flight requests finish, stops refreshing the routing table. */
  close(): Promise<void>;
}

/** Loads the routing table and starts its refresh (the first load must succeed), then builds the app and listens. */
export async function startGateway(opts: GatewayServerOptions): Promise<RunningGateway> {
  const app = Fastify({
    logger: opts.logger ? { name: 'gateway' } : false,
    // Longer than typical client pools (60 s), so the gateway is not the side that closes an idle connection mid-reuse.
    keepAliveTimeout: 72_000,
    // A stream may run for many minutes; only the client or the replica ends it.
    requestTimeout: 0,
    connectionTimeout: 0,
    forceCloseConnections: 'idle',
    return503OnClosing: true,
  });
  await opts.routing.start();
  const log = (msg: string, fields?: Record<string, unknown>): void => app.log.warn(fields ?? {}, msg);
  await app.register(buildGatewayApp({ routing: opts.routing, apiKeys: opts.apiKeys, log }));
  app.addHook('onClose', async () => opts.routing.stop());
  await app.listen({ host: opts.host, port: opts.port });
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : opts.port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return { url: `http://${host}:${port}`, close: async () => app.close() };
}
