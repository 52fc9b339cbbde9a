/**
 * `GET /v1/gateway/routes?after=N` (a gateway certificate): the route changes after N, then each new one as the
 * control plane's route feed reads it, as newline-delimited JSON on one long response (contract RouteStreamLine).
 */
import type { FastifyInstance } from 'fastify';
import { errorSchema } from './identity';
import type { RouteFeed } from './route-feed';

/** A gateway that reads slower than this many bytes behind is cut (it falls back to polling and resubscribes). */
const MAX_BEHIND_BYTES = 4 << 20;

const querySchema = {
  type: 'object',
  additionalProperties: false,
  properties: { after: { type: 'integer', minimum: 0 } },
} as const;

/** Registers the route stream over `feed`. */
export async function routeStreamRoutes(app: FastifyInstance, opts: { feed: RouteFeed }): Promise<void> {
  app.get<{ Querystring: { after?: number } }>(
    '/v1/gateway/routes',
    { schema: { querystring: querySchema, response: { 400: errorSchema } } },
    async (req, reply) => {
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
      // Each line as soon as it is written: no Nagle delay on a push.
      res.socket?.setNoDelay(true);
      let closed = false;
      const end = (): void => {
        if (closed) return;
        closed = true;
        res.end();
      };
      const write = (line: string): boolean => {
        if (closed || res.destroyed) return false;
        res.write(line);
        return res.writableLength <= MAX_BEHIND_BYTES;
      };
      let unsubscribe: (() => void) | null = null;
      res.once('close', () => {
        closed = true;
        unsubscribe?.();
      });
      unsubscribe = await opts.feed.subscribe(req.query.after ?? 0, write, end);
      if (closed) unsubscribe();
    },
  );
}
