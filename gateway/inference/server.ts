/** Runs the inference gateway: fastify with request ids, timeouts for long streams, graceful close, and `listen`. */
import Fastify from 'fastify';
import type { GatewayTimeouts } from '../../config/types';
import { buildGatewayApp } from './app';
import { requestId, type GatewayLog } from './log';
import type { RoutingTable } from './routing';

/** Where and what the gateway serves. */
export interface GatewayServerOptions {
  host: string;
  /** 0 = any free port (see the returned url) */
  port: number;
  routing: RoutingTable;
  apiKeys: string[];
  /** The role's JSON-lines log; nothing is logged without one. */
  log?: GatewayLog;
  /** How long to wait on a replica; default server.yaml's defaults. */
  timeouts?: GatewayTimeouts;
  /** One access-log line per request (server.yaml gateway.accessLog). */
  accessLog?: boolean;
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
    // The gateway logs through opts.log (one logger per role); fastify's own request log stays off.
    logger: false,
    // The client's x-request-id when it is a sane one, so its id names the request in every log line.
    genReqId: (req) => requestId(req.headers['x-request-id']),
    // Longer than typical client pools (60 s), so the gateway is not the side that closes an idle connection mid-reuse.
    keepAliveTimeout: 72_000,
    // A stream may run for many minutes; the upstream timeouts (opts.timeouts) bound each wait on a replica.
    requestTimeout: 0,
    connectionTimeout: 0,
    forceCloseConnections: 'idle',
    return503OnClosing: true,
  });
  await opts.routing.start();
  await app.register(
    buildGatewayApp({
      routing: opts.routing,
      apiKeys: opts.apiKeys,
      log: opts.log,
      timeouts: opts.timeouts,
      accessLog: opts.accessLog,
    }),
  );
  app.addHook('onClose', async () => opts.routing.stop());
  await app.listen({ host: opts.host, port: opts.port });
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : opts.port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return { url: `http://${host}:${port}`, close: async () => app.close() };
}
