/**
 * Cross-origin requests from browsers (CORS), a decision of server.yaml's `gateway.corsOrigins`: a page on a listed
 * origin (or any, with `*`) may call the API with its key; any other origin's preflight is refused with 403
 * LLMGW_CORS_REFUSED, and without the allow headers the browser does not let the page read an answer. Clients that
 * are not browsers send no preflight and are not concerned.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ERRORS, openAiError, quoteInput } from '../../lib/errors';

const allowed = (origins: ReadonlySet<string>, origin: string): boolean => origins.has(origin) || origins.has('*');

/** Sets the CORS answer headers on a request from a browser page of an allowed origin (nothing for the others). */
export function corsHeaders(origins: ReadonlySet<string>, origin: string, res: ServerResponse): void {
  if (!allowed(origins, origin)) return;
  res.setHeader('access-control-allow-origin', origin);
  res.setHeader('vary', 'origin');
  res.setHeader('access-control-expose-headers', 'x-request-id');
}

/** Answers a preflight (OPTIONS): 204 with what may be sent for an allowed origin, 403 for another, 404 when it is no preflight. */
export function preflight(origins: ReadonlySet<string>, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const origin = req.headers.origin;
  if (origin === undefined || req.headers['access-control-request-method'] === undefined) {
    return reply
      .code(404)
      .send(
        openAiError(
          'LLMGW_NOT_FOUND',
          `no route OPTIONS ${quoteInput(req.url.split('?')[0], 100)}: OPTIONS answers browsers' CORS preflights only`,
        ),
      );
  }
  if (!allowed(origins, origin)) {
    const message = `cross-origin requests from ${quoteInput(origin, 100)} are not allowed: add the origin to gateway.corsOrigins in server.yaml`;
    return reply.code(ERRORS.LLMGW_CORS_REFUSED.status).send(openAiError('LLMGW_CORS_REFUSED', message));
  }
  return reply
    .code(204)
    .headers({
      'access-control-allow-methods': 'GET, POST',
      'access-control-allow-headers': 'authorization, content-type, x-request-id',
      'access-control-max-age': '600',
    })
    .send();
}
