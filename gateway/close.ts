/**
 * Closing a fastify listener with a deadline (the gateway, the control API): a stop must be a stop. Connections are
 * tracked from their first byte (lib/connections.ts), and those still open when the grace runs out are dropped.
 */
import type { FastifyInstance } from 'fastify';
import { trackConnections, type Connections } from '../lib/connections';

/** How long a closing gateway lets requests in flight finish before it drops them, ms. */
export const CLOSE_GRACE_MS = 5000;

/** Gives a fastify app's close() a deadline: the connections still open `graceMs` after it began are dropped. */
export function closeDeadline(app: FastifyInstance, graceMs = CLOSE_GRACE_MS): Connections {
  const connections = trackConnections(app.server);
  // preClose runs before fastify closes the server and waits for its connections.
  app.addHook('preClose', (done) => {
    connections.dropAfter(graceMs);
    done();
  });
  return connections;
}
