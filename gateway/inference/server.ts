/**
 * Runs the inference gateway: a node:http server whose inference routes take the fast path (fast-path.ts) and whose
 * other routes are fastify's, with request ids, timeouts for long streams, a close with a deadline, and `listen`.
 */
import { createServer, type Server } from 'node:http';
import { SignalPoller } from './engine-signals';
import Fastify from 'fastify';
import { DEFAULT_CONFIG } from '../../config/defaults';
import type { GatewayAdmission, GatewayTimeouts } from '../../config/types';
import { closeDeadline } from '../close';
import { clientErrorHandler } from '../errors';
import { startMetricsListener } from '../metrics';
import { buildGatewayApp } from './app';
import { fastPath, type Handler } from './fast-path';
import { Inference } from './inference';
import type { DoorAgent } from '../../lib/door-agent';
import type { KeyTable } from './keys';
import type { QuotaKeeper } from './quota';
import { GatewayMetrics } from './metrics';
import { requestId, type GatewayLog } from './log';
import type { ModelStats } from './model-stats';
import type { RoutingTable } from './routing';

/** Where and what the gateway serves. */
export interface GatewayServerOptions {
  host: string;
  /** 0 = any free port (see the returned url) */
  port: number;
  routing: RoutingTable;
  apiKeys: string[];
  /** The key store's copy: when given, every request but /health needs a key (apiKeys are then its static keys). */
  keys?: KeyTable;
  /** Per-key quotas and usage (with `keys`). */
  quota?: QuotaKeeper;
  /** The role's JSON-lines log; nothing is logged without one. */
  log?: GatewayLog;
  /** How long to wait on a replica, and for a request to arrive; default server.yaml's defaults. */
  timeouts?: GatewayTimeouts;
  /** One access-log line per request (server.yaml gateway.accessLog). */
  accessLog?: boolean;
  /** Browser origins answered cross-origin (server.yaml gateway.corsOrigins); default none. */
  corsOrigins?: string[];
  /** The bounded queue in front of full replicas (server.yaml gateway.admission); default its defaults. */
  admission?: GatewayAdmission;
  /** Where to serve the gateway's metrics (server.yaml listeners.metrics.gateway); none: nothing is measured. */
  metrics?: { host: string; port: number } | null;
  /** The keep-alive TLS pool to the nodes' doors, with the gateway certificate (door-agent.ts) */
  doorAgent?: DoorAgent;
  /** Largest inference request body, bytes (default 32 MiB; tests set a small one). */
  bodyLimit?: number;
  /** How long close() lets requests in flight finish before it cuts them, ms (default CLOSE_GRACE_MS). */
  closeGraceMs?: number;
  /** Per-model request counts and TTFT (the gateway role's, reported to MySQL); none = nothing counted. */
  stats?: ModelStats;
  /**
   * What keeps the routing table current (route push: route-push.ts): started instead of the table's own polling
   * and stopped with the gateway. None: the table re-reads the store every refreshMs.
   */
  routeSource?: { start(): Promise<void>; stop(): void };
}

/** A listening gateway. */
export interface RunningGateway {
  /** `http://host:port` */
  url: string;
  /** `http://host:port/metrics` when the metrics listener is on */
  metricsUrl: string | null;
  /** Stops accepting connections, lets in-flight requests finish for the grace and cuts the rest, stops refreshing the routing table. */
  close(): Promise<void>;
}

/** Loads the routing table and starts its refresh (the first load must succeed), then builds the app and listens. */
export async function startGateway(opts: GatewayServerOptions): Promise<RunningGateway> {
  const timeouts = opts.timeouts ?? DEFAULT_CONFIG.gateway.timeouts;
  const metrics = opts.metrics ? new GatewayMetrics({ routing: opts.routing }) : undefined;
  const inferenceOpts = {
    routing: opts.routing,
    apiKeys: opts.apiKeys,
    keys: opts.keys,
    quota: opts.quota,
    log: opts.log,
    timeouts,
    accessLog: opts.accessLog,
    corsOrigins: opts.corsOrigins,
    stats: opts.stats,
    admission: opts.admission,
    metrics,
    doorAgent: opts.doorAgent,
    bodyLimit: opts.bodyLimit,
  };
  const inference = new Inference(inferenceOpts);
  let closing = false;
  const app = Fastify({
    // The inference routes skip fastify's request lifecycle: the server's handler serves them (fast-path.ts) and
    // passes every other request to fastify's. The server is made as fastify makes its own (lib/server.js).
    serverFactory: (handler, o): Server => {
      const server = createServer(
        o.http ?? {},
        fastPath(inference, handler as Handler, () => closing),
      );
      server.keepAliveTimeout = o.keepAliveTimeout as number;
      server.requestTimeout = o.requestTimeout as number;
      server.setTimeout(o.connectionTimeout as number);
      return server;
    },
    // The gateway logs through opts.log (one logger per role); fastify's own request log stays off.
    logger: false,
    // The client's x-request-id when it is a sane one, so its id names the request in every log line.
    genReqId: (req) => requestId(req.headers['x-request-id']),
    // Longer than typical client pools (60 s), so the gateway is not the side that closes an idle connection mid-reuse.
    keepAliveTimeout: 72_000,
    // Node's request timeout runs from a request's first byte until its body is complete, and not over the answer:
    // an upload that stops is answered 408 and closed, while a stream may run for many minutes (the upstream
    // timeouts bound each wait on a replica). Node checks it once per connectionsCheckingInterval (default 30 s).
    requestTimeout: timeouts.requestMs,
    http: { headersTimeout: timeouts.requestMs, connectionsCheckingInterval: 1000 },
    connectionTimeout: 0,
    clientErrorHandler,
    forceCloseConnections: 'idle',
    return503OnClosing: true,
  });
  closeDeadline(app, opts.closeGraceMs);
  // From here on, fastify answers every new request (503 once it has stopped routing).
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  const routes = opts.routeSource ?? opts.routing;
  await routes.start();
  // The engines' queues, from the nodes' doors: a weight on the least-outstanding pick, never waited on. Its own
  // connection per door: a poll never takes, or waits for, a connection a request could use.
  const signalAgent = opts.doorAgent?.sibling({ maxSockets: 1, maxFreeSockets: 1 }) ?? null;
  const signals = signalAgent
    ? new SignalPoller({ table: opts.routing, agent: signalAgent, ...(opts.log ? { log: opts.log } : {}) })
    : null;
  signals?.start();
  await opts.keys?.start();
  opts.quota?.start();
  await app.register(buildGatewayApp({ ...inferenceOpts, inference }));
  app.addHook('onClose', async () => {
    inference.close();
    routes.stop();
    signals?.stop();
    signalAgent?.destroy();
    opts.keys?.stop();
    await opts.quota?.stop();
  });
  await app.listen({ host: opts.host, port: opts.port });
  const listener =
    metrics && opts.metrics
      ? await startMetricsListener({ ...opts.metrics, registry: metrics.registry }).catch(async (err: unknown) => {
          await app.close();
          throw err;
        })
      : null;
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : opts.port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    url: `http://${host}:${port}`,
    metricsUrl: listener?.url ?? null,
    async close(): Promise<void> {
      await app.close();
      await listener?.close();
    },
  };
}
