/** The inference gateway's OpenAI-compatible API as a fastify plugin: models, completions, embeddings, health. */
import { Agent, type IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { DEFAULT_CONFIG } from '../../config/defaults';
import type { GatewayTimeouts } from '../../config/types';
import { ERRORS, openAiError, quoteInput, type ErrorCode } from '../../lib/errors';
import { answerErrors, answerUnknownRoutes } from '../errors';
import { Admission, admissionKeyOf, type AdmissionOptions } from './admission';
import { corsHeaders, preflight } from './cors';
import { accessLine, silentLog, type AccessNote, type GatewayLog } from './log';
import { meterGatewayAnswers, type GatewayMetrics } from './metrics-hooks';
import { proxyRequest, type ProxyDeps } from './proxy';
import { checkRequest, PROXIED } from './request-check';
import type { RoutableReplica, RoutingTable } from './routing';

/** Options of the gateway plugin. */
export interface GatewayAppOptions {
  routing: RoutingTable;
  /** Accepted bearer keys; empty = no authentication. */
  apiKeys: string[];
  /** Upstream connection pool; by default one keep-alive agent owned (and destroyed) by the app. */
  agent?: Agent;
  /** Largest request body in bytes (long prompts are big); default 32 MiB. */
  bodyLimit?: number;
  /** Warnings and errors (retries, cut answers, ejections), and the access log; each line carries the request id. */
  log?: GatewayLog;
  /** How long to wait on a replica; default server.yaml's defaults (gateway.timeouts). */
  timeouts?: GatewayTimeouts;
  /** One `request` line per request through `log`. */
  accessLog?: boolean;
  /** Browser origins answered cross-origin (CORS); default none: preflights refused. */
  corsOrigins?: string[];
  /** The bounded queue in front of full replicas; default server.yaml's defaults (gateway.admission). */
  admission?: Omit<AdmissionOptions, 'onReject'>;
  /** The gateway's metrics (served on their own listener by server.ts); none: nothing is measured. */
  metrics?: GatewayMetrics;
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

/**
 * Builds the gateway plugin. It registers routes only; `gateway/server.ts` listens (and makes request ids from the
 * client's x-request-id: the app uses fastify's request id, echoes it and passes it on to the replica).
 */
export function buildGatewayApp(opts: GatewayAppOptions): FastifyPluginAsync {
  return async (app: FastifyInstance): Promise<void> => {
    const { routing } = opts;
    const log = opts.log ?? silentLog;
    const timeouts = opts.timeouts ?? DEFAULT_CONFIG.gateway.timeouts;
    // lifo keeps a few warm sockets busy instead of cycling through every idle one.
    const agent =
      opts.agent ?? new Agent({ keepAlive: true, keepAliveMsecs: 30_000, maxFreeSockets: 1024, scheduling: 'lifo' });
    if (!opts.agent) app.addHook('onClose', async () => agent.destroy());
    const { metrics } = opts;
    const deps: ProxyDeps = { routing, agent, log, timeouts, metrics };
    const authorized = new Set(opts.apiKeys.map((k) => `Bearer ${k}`));
    const notes = opts.accessLog ? new WeakMap<IncomingMessage, AccessNote>() : null;
    const created = Math.floor(Date.now() / 1000);
    const admission = new Admission(routing, {
      ...(opts.admission ?? DEFAULT_CONFIG.gateway.admission),
      onReject: metrics ? (model, why): void => metrics.rejectedBy(model, why) : undefined,
    });
    if (metrics) meterGatewayAnswers(app, metrics, admission);
    const forward = (
      req: FastifyRequest,
      reply: FastifyReply,
      model: string,
      path: string,
      body: Buffer,
      replica: RoutableReplica,
      firstByteMs: number | undefined,
      note: AccessNote | undefined,
      queuedMs = 0,
    ): void => {
      reply.hijack();
      const times = metrics?.times(req.arrivedAt);
      if (times) times.queuedMs = queuedMs;
      proxyRequest(deps, {
        model,
        path,
        body,
        first: replica,
        firstByteMs: firstByteMs ?? timeouts.firstByteMs,
        reqId: req.id,
        req: req.raw,
        res: reply.raw,
        note,
        key: metrics ? metrics.keyIdOf(req.headers.authorization) : undefined,
        times,
      });
    };

    answerErrors(app, log);
    answerUnknownRoutes(
      app,
      'GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings',
    );
    const origins = new Set(opts.corsOrigins ?? []);

    // Keep the raw bytes to forward untouched; the route scans them for the model (request-check.ts), never
    // building the tree. JSON only: any other content type is refused (415), so a browser page cannot post a
    // "simple" cross-origin request (text/plain, a form) that skips the CORS preflight.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser(
      'application/json',
      { parseAs: 'buffer', bodyLimit: opts.bodyLimit ?? 32 * 1024 * 1024 },
      (_req, raw, done) => done(null, raw),
    );

    // One hook for every request, and a callback one: cheaper per request than an async hook.
    app.addHook('onRequest', (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
      reply.raw.setHeader('x-request-id', req.id);
      if (req.headers.origin !== undefined) corsHeaders(origins, req.headers.origin, reply.raw);
      if (notes) notes.set(req.raw, accessLine(log, req.id, req.raw, reply.raw));
      if (metrics) req.arrivedAt = performance.now();
      const h = req.headers.authorization;
      if (authorized.size > 0 && req.url !== '/health' && req.method !== 'OPTIONS' && (!h || !authorized.has(h))) {
        return void sendError(
          reply,
          'LLMGW_UNAUTHORIZED',
          h ? 'invalid API key' : 'missing API key: send "Authorization: Bearer <key>"',
        );
      }
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

    app.get('/v1/models', { schema: { response: { 200: modelsSchema, ...errorResponses } } }, async () => ({
      object: 'list',
      data: routing.models().map((id) => ({ id, object: 'model', created, owned_by: 'llmgw' })),
    }));

    // A browser's CORS preflight: answered for the origins in gateway.corsOrigins, refused for the others.
    app.options('*', async (req: FastifyRequest, reply: FastifyReply) => preflight(origins, req, reply));

    for (const path of PROXIED) {
      app.post(path, { schema: { response: errorResponses } }, async (req: FastifyRequest, reply: FastifyReply) => {
        const body = (req.body as Buffer | undefined) ?? Buffer.alloc(0);
        const checked = checkRequest(path, body);
        if (checked.kind === 'error') return sendError(reply, 'LLMGW_BAD_REQUEST', checked.message);
        const { model } = checked;
        if (metrics) req.inferenceModel = model;
        const note = notes?.get(req.raw);
        if (note) note.model = model;
        // An engine that cannot embed answers 404 or 501 in its own words; the gateway knows it from the catalog.
        const refusal = path === '/v1/embeddings' ? routing.embeddingRefusal(model) : null;
        if (refusal)
          return sendError(
            reply,
            'LLMGW_ENDPOINT_UNSUPPORTED',
            `model ${quoteInput(model)} cannot serve /v1/embeddings: ${refusal}`,
          );
        const picked = admission.pick(model);
        switch (picked.kind) {
          case 'unknown-model': {
            const known = routing.models();
            return sendError(
              reply,
              'LLMGW_UNKNOWN_MODEL',
              `model ${quoteInput(model)} does not exist; available models: ${known.length ? known.join(', ') : 'none'}`,
            );
          }
          case 'none-ready':
            return sendError(reply, 'LLMGW_NO_READY_REPLICA', picked.reason);
          case 'ok':
            forward(req, reply, model, path, body, picked.replica, picked.firstByteMs, note);
            return reply;
          case 'busy': {
            const since = performance.now();
            return admission.wait(model, admissionKeyOf(req), reply, (replica, firstByteMs) =>
              forward(req, reply, model, path, body, replica, firstByteMs, note, performance.now() - since),
            );
          }
          default: {
            const never: never = picked;
            throw new Error(`unhandled pick ${JSON.stringify(never)}`);
          }
        }
      });
    }
  };
}
