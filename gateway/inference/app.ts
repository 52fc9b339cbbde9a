/** The inference gateway's OpenAI-compatible API as a fastify plugin: models, completions, embeddings, health. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { ERRORS, openAiError, type ErrorCode } from '../../lib/errors';
import type { KeyRecord } from '../../lib/store/keys';
import { answerErrors, answerUnknownRoutes } from '../errors';
import { corsHeaders, preflight } from './cors';
import { Inference, type Exchange, type InferenceOptions } from './inference';
import { accessLine, silentLog, type AccessNote } from './log';
import { meterGatewayAnswers } from './metrics-hooks';
import { PROXIED } from './request-check';

declare module 'fastify' {
  interface FastifyRequest {
    /** The stored key the request came with (null: a static key, or no key checking) */
    apiKey: KeyRecord | null;
  }
}

/** Options of the gateway plugin. */
export interface GatewayAppOptions extends InferenceOptions {
  /** The inference routes' shared state, when the server's fast path shares it; by default the app's own. */
  inference?: Inference;
}

const errorSchema = {
  type: 'object',
  properties: {
    error: {
      type: 'object',
      properties: { message: { type: 'string' }, type: { type: 'string' }, code: { type: 'string' } },
    },
  },
} as const;
const errorResponses = {
  400: errorSchema,
  401: errorSchema,
  403: errorSchema,
  404: errorSchema,
  413: errorSchema,
  415: errorSchema,
  429: errorSchema,
  502: errorSchema,
  503: errorSchema,
  504: errorSchema,
} as const;
const modelsSchema = {
  type: 'object',
  properties: {
    object: { type: 'string' },
    data: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          id: { type: 'string' },
          object: { type: 'string' },
          created: { type: 'integer' },
          owned_by: { type: 'string' },
        },
      },
    },
  },
} as const;

const sendError = (reply: FastifyReply, code: ErrorCode, message: string): FastifyReply =>
  reply.code(ERRORS[code].status).send(openAiError(code, message));

/** A fastify request as the inference routes see it: answers go through the reply (and its onSend metering). */
class FastifyExchange implements Exchange {
  readonly id: string;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly apiKey: KeyRecord | null;
  readonly arrivedAt: number;
  readonly note: AccessNote | undefined;

  constructor(
    private readonly request: FastifyRequest,
    private readonly reply: FastifyReply,
    note: AccessNote | undefined,
  ) {
    this.id = request.id;
    this.req = request.raw;
    this.res = reply.raw;
    this.apiKey = request.apiKey;
    this.arrivedAt = request.arrivedAt;
    this.note = note;
  }

  get model(): string {
    return this.request.inferenceModel;
  }

  set model(m: string) {
    this.request.inferenceModel = m;
  }

  fail(code: ErrorCode, message: string, retryAfterS?: number): void {
    if (retryAfterS !== undefined) this.reply.header('retry-after', String(retryAfterS));
    void sendError(this.reply, code, message);
  }

  hijack(): void {
    this.reply.hijack();
  }
}

/**
 * Builds the gateway plugin. It registers routes only; `gateway/server.ts` listens (and makes request ids from the
 * client's x-request-id: the app uses fastify's request id, echoes it and passes it on to the replica).
 */
export function buildGatewayApp(opts: GatewayAppOptions): FastifyPluginAsync {
  return async (app: FastifyInstance): Promise<void> => {
    const inference = opts.inference ?? new Inference(opts);
    if (!opts.inference) app.addHook('onClose', async () => inference.close());
    const { routing, metrics } = inference;
    const log = opts.log ?? silentLog;
    app.decorateRequest('apiKey', null);
    app.decorateRequest('arrivedAt', 0);
    app.decorateRequest('inferenceModel', '');
    const notes = inference.accessLog ? new WeakMap<IncomingMessage, AccessNote>() : null;
    const created = Math.floor(Date.now() / 1000);
    if (metrics) meterGatewayAnswers(app, inference);

    answerErrors(app, log);
    answerUnknownRoutes(
      app,
      'GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings',
    );
    const { origins } = inference;

    // Keep the raw bytes to forward untouched; the route scans them for the model (request-check.ts), never
    // building the tree. JSON only: any other content type is refused (415), so a browser page cannot post a
    // "simple" cross-origin request (text/plain, a form) that skips the CORS preflight.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser(
      'application/json',
      { parseAs: 'buffer', bodyLimit: inference.bodyLimit },
      (_req, raw, done) => done(null, raw),
    );

    // One hook for every request, and a callback one: cheaper per request than an async hook.
    app.addHook('onRequest', (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
      reply.raw.setHeader('x-request-id', req.id);
      if (req.headers.origin !== undefined) corsHeaders(origins, req.headers.origin, reply.raw);
      if (notes) notes.set(req.raw, accessLine(log, req.id, req.raw, reply.raw));
      if (metrics) req.arrivedAt = performance.now();
      if (req.url === '/health' || req.method === 'OPTIONS') return done();
      const auth = inference.authenticate(req.headers.authorization);
      if (auth.kind === 'refused') return void sendError(reply, 'LLMGW_INVALID_API_KEY', auth.message);
      if (auth.kind === 'key') req.apiKey = auth.key;
      done();
    });

    app.get(
      '/health',
      {
        schema: {
          response: {
            200: { type: 'object', properties: { status: { type: 'string' }, models: { type: 'integer' } } },
          },
        },
      },
      async () => ({
        status: 'ok',
        models: routing.models().length,
      }),
    );

    // What this gateway routes now (its table lags the store by up to gateway.refreshMs): for whoever must know a
    // replica is reachable here, not only ready in the store — the local cluster waits on it before it says "up".
    app.get(
      '/health/routes',
      {
        schema: {
          response: {
            200: {
              type: 'object',
              properties: { models: { type: 'object', additionalProperties: { type: 'integer' } } },
            },
            ...errorResponses,
          },
        },
      },
      async () => ({
        models: routing.readyCounts(),
      }),
    );

    // A scoped key sees only its own models.
    app.get('/v1/models', { schema: { response: { 200: modelsSchema, ...errorResponses } } }, async (req) => {
      const scope = req.apiKey?.models;
      return {
        object: 'list',
        data: routing
          .models()
          .filter((id) => !scope || scope.includes(id))
          .map((id) => ({ id, object: 'model', created, owned_by: 'llmgw' })),
      };
    });

    // A browser's CORS preflight: answered for the origins in gateway.corsOrigins, refused for the others.
    app.options('*', async (req: FastifyRequest, reply: FastifyReply) => preflight(origins, req, reply));

    for (const path of PROXIED) {
      // The route's bodyLimit is the parser's: a 413 names it (it named fastify's default of 1 MiB before).
      app.post(
        path,
        { bodyLimit: inference.bodyLimit, schema: { response: errorResponses } },
        async (req: FastifyRequest, reply: FastifyReply) => {
          const body = (req.body as Buffer | undefined) ?? Buffer.alloc(0);
          await inference.serve(new FastifyExchange(req, reply, notes?.get(req.raw)), path, body);
          return reply;
        },
      );
    }
  };
}
