/**
 * The control plane served over mutual TLS: fastify on HTTPS asking every client for a certificate, the
 * certificate gate judging it (agent routes need a node certificate, the rest an operator one), then the
 * control routes, which know a node only by its certificate's CN.
 */
import type { Client } from '@temporalio/client';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Store } from '../../lib/store/store';
import { closeDeadline } from '../close';
import { answerErrors, answerUnknownRoutes, clientErrorHandler } from '../errors';
import { NodeBeats } from './node-beats';
import { controlRoutes, type ControlAppOptions } from './routes';
import { CertificateGate, installGate, mtlsServerOptions, type CertRole } from '../mtls';
import { CONTROL_AJV } from './schemas';
import { weightsRoutes } from './weights-routes';
import { RouteChanges } from '../../lib/store/route-changes';
import { RouteFeed, type RouteFeedOptions } from './route-feed';
import { routeStreamRoutes } from './route-stream-routes';
import { isPageRoute, pageRoutes } from './page/routes';
import type { TemporalUi } from './page/snapshot';

/** How long a whole request (headers and body) may take to arrive, ms: an agent's report is a few KB. */
const REQUEST_MS = 60_000;

export interface ControlServerOptions extends Omit<ControlAppOptions, 'log' | 'revoke'> {
  store: Store;
  tls: { caPem: string; certPem: string; keyPem: string };
  log: (msg: string, fields: Record<string, unknown>) => void;
  /** Marks a node's certificates revoked (default: in the certificates table); open connections are cut after. */
  revoke?: (nodeId: string, reason: string) => Promise<number>;
  /** How often revocations made elsewhere are picked up, ms (default 1000). */
  refreshMs?: number;
  logger?: boolean;
  /** Serve the cluster page (/page/, docs/cluster-page.md), starting workflows with this client. */
  page?: { client: Client; ui: TemporalUi; liveEveryMs?: number };
  /** The route feed's timers (route-feed.ts), for tests and the push benchmark */
  routeFeed?: Pick<RouteFeedOptions, 'tailMs' | 'idleTailMs' | 'pingMs' | 'gapMs'>;
}

/** Which certificate role a route needs, by its routed path (the pattern the router matched, decoded). */
export function roleForUrl(route: string): CertRole {
  if (route.startsWith('/v1/agent/')) return 'node';
  return route.startsWith('/v1/gateway/') ? 'gateway' : 'operator';
}

/** Builds (does not listen) the HTTPS control plane app and starts its certificate gate. */
export async function buildControlServer(
  o: ControlServerOptions,
): Promise<{ app: FastifyInstance; gate: CertificateGate }> {
  const { store, log } = o;
  const gate = new CertificateGate({
    caPem: o.tls.caPem,
    lookup: {
      bySerial: async (serial) => {
        const c = await store.certificateBySerial(serial);
        return c ? { cn: c.cn, role: c.role, revokedAt: c.revokedAt } : null;
      },
      revokedSerials: async () => (await store.revokedSerials()).map((r) => r.serial),
    },
    log,
    refreshMs: o.refreshMs,
  });
  await gate.start();
  // Route changes to the gateways subscribed here: this process's own at once, other control planes' by tailing.
  const feed = new RouteFeed({ changes: new RouteChanges(store.pool), log, ...o.routeFeed });
  await feed.start();
  const unpoke = store.onRouteChange(() => feed.poke());
  const app = Fastify({
    logger: o.logger ?? false,
    https: { ...mtlsServerOptions(o.tls), connectionsCheckingInterval: 1000 },
    // close() must not wait for agents' keep-alive connections, nor (closeDeadline) for stalled handshakes.
    forceCloseConnections: true,
    // A body that stops coming is answered 408 and closed (Node checks once per connectionsCheckingInterval).
    requestTimeout: REQUEST_MS,
    clientErrorHandler,
    ajv: CONTROL_AJV,
  });
  // No grace: forceCloseConnections cuts every HTTP connection at close already, so what is left then is TLS
  // handshakes that have sent no request (stalled ones would hold close() for as long as they stall).
  closeDeadline(app, 0);
  // JSON only (fastify's own parser, which refuses __proto__ keys): any other body is 415.
  app.removeContentTypeParser('text/plain');
  app.addHook('onClose', async () => {
    gate.stop();
    unpoke();
    feed.stop();
  });
  answerErrors(app, log);
  installGate(app, gate, roleForUrl, log, o.page ? isPageRoute : undefined);
  answerUnknownRoutes(
    app,
    'the control API: /v1/agent/… (node certificates), /v1/nodes, /v1/replicas, /v1/models, /v1/events, /v1/weights, /v1/keys (operator certificates), /v1/gateway/routes (gateway certificates), /page/ (the cluster page), /health',
  );
  const revokeInTable = (nodeId: string, reason: string): Promise<number> => store.revokeCertificates(nodeId, reason);
  const revokeAndCut = async (nodeId: string, reason: string): Promise<number> => {
    const n = await (o.revoke ?? revokeInTable)(nodeId, reason);
    // At once, not at the next refresh: the node's open keep-alive connections are cut now.
    await gate.refresh();
    return n;
  };
  // One memory of the agents' beats for the agent routes, the node list and the page.
  const beats = o.beats ?? new NodeBeats();
  await app.register(controlRoutes, { ...o, beats, log, revoke: revokeAndCut });
  await app.register(weightsRoutes, { store, log });
  await app.register(routeStreamRoutes, { feed });
  if (o.page) await app.register(pageRoutes, { ...o, ...o.page, beats, gate, log, revoke: revokeAndCut });
  return { app, gate };
}
