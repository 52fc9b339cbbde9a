/**
 * A listener's TCP connections, tracked from their first byte (before TLS), so that closing it has a deadline: a
 * server's own close waits for every connection to end, and some never would (a TLS handshake that stalls, an
 * upload that stopped, a stream a client keeps open). Every llmgw listener closes through this.
 */
import type { Server, Socket } from 'node:net';

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
