/** Where the gateway app meters the answers it gives itself (proxied answers are metered in proxy.ts). */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Admission } from './admission';
import type { GatewayMetrics } from './metrics';
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
 * An onSend hook runs only when the app itself sends: a proxied answer is hijacked and never passes here.
 */
export function meterGatewayAnswers(app: FastifyInstance, metrics: GatewayMetrics, admission: Admission): void {
  metrics.watchQueue(() => admission.queuedByModel());
  app.decorateRequest('arrivedAt', 0);
  app.decorateRequest('inferenceModel', '');
  app.addHook('onSend', (req: FastifyRequest, reply: FastifyReply, payload: unknown, done) => {
    if (INFERENCE.has(req.routeOptions.url ?? '')) {
      // A model the table does not know is not a label (a client could make any number of them).
      const model = req.inferenceModel && metrics.knows(req.inferenceModel) ? req.inferenceModel : '';
      const key =
        reply.statusCode === 401 ? 'unauthorized' : (req.apiKey?.name ?? metrics.keyIdOf(req.headers.authorization));
      metrics.answered(model, key, reply.statusCode);
    }
    done(null, payload);
  });
}
