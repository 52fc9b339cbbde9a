/**
 * Closing a listener with a deadline, for every listener (the gateway, the control API, the door): a stop must be a
 * stop. A server's own close waits for every connection to end, and some never would: a TLS handshake that stalls,
 * an upload that stopped, a stream a client keeps open. So each connection is tracked from its first byte (before
 * TLS), and whatever is still open when the grace runs out is dropped.
 */
import type { Server, Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

/** How long a closing listener lets open connections finish before it drops them, ms. */
export const CLOSE_GRACE_MS = 5000;

/** How long a TLS handshake may take, ms (Node's default is 2 minutes): a handshake takes milliseconds, and one that stalls holds a socket. */
export const TLS_HANDSHAKE_MS = 10_000;

/** The open connections of a listener. */
export interface Connections {
  /** how many are open now */
  count(): number;
  /** Drops, `graceMs` from now, every connection still open then (the timer does not keep the process alive). */
  dropAfter(graceMs: number): void;
  /** Runs `close` (which stops accepting and waits for connections to end), dropping what is still open after `graceMs`. */
  closeWithin(graceMs: number, close: () => Promise<void>): Promise<void>;
}

/** Starts tracking `server`'s TCP connections (call before it listens). */
export function trackConnections(server: Server): Connections {
  const open = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    open.add(s);
    s.once('close', () => open.delete(s));
  });
  const dropAfter = (graceMs: number): void => {
    setTimeout(() => {
      for (const s of open) s.destroy();
    }, graceMs).unref();
  };
  return {
    count: () => open.size,
    dropAfter,
    async closeWithin(graceMs, close) {
      dropAfter(graceMs);
      await close();
    },
  };
}

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
