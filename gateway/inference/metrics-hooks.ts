/** Where the gateway app meters the answers it gives itself (proxied answers are metered in proxy.ts). */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Inference } from './inference';
import { PROXIED } from './request-check';

export type { GatewayMetrics } from './metrics';

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() when its headers were read (set only with metrics on) */
    arrivedAt: number;
    /** the model the request named, once read ('' before) */
    inferenceModel: string;
  }
}

const INFERENCE = new Set<string>(PROXIED);

/**
 * Counts the gateway's own answers to inference requests (errors, 429/503 from admission) by model, key and status.
 * An onSend hook runs only when the app itself sends: a proxied answer is hijacked and never passes here. (The
 * server's fast path, fast-path.ts, counts its own answers the same way, through `inference.answered`.)
 */
export function meterGatewayAnswers(app: FastifyInstance, inference: Inference): void {
  app.addHook('onSend', (req: FastifyRequest, reply: FastifyReply, payload: unknown, done) => {
    if (INFERENCE.has(req.routeOptions.url ?? ''))
      inference.answered(req.inferenceModel, req.apiKey, req.headers.authorization, reply.statusCode);
    done(null, payload);
  });
}
