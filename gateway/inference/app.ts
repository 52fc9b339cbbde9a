/** The inference gateway's OpenAI-compatible API as a fastify plugin: models, completions, embeddings, health. */
import { Agent, type IncomingMessage, type ServerResponse } from 'node:http';
import type { DoorAgent } from '../../lib/door-agent';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { DEFAULT_CONFIG } from '../../config/defaults';
import type { GatewayTimeouts } from '../../config/types';
import { ERRORS, openAiError, quoteInput, type ErrorCode } from '../../lib/errors';
import type { KeyRecord } from '../../lib/store/keys';
import { answerErrors, answerUnknownRoutes } from '../errors';
import { Admission, admissionKeyOf, type AdmissionOptions } from './admission';
import { affinityKey, byKey } from './affinity';
import { corsHeaders, preflight } from './cors';
import { scopeRefusal, type KeyTable } from './keys';
import { accessLine, silentLog, type AccessNote, type GatewayLog } from './log';
import type { ModelStats } from './model-stats';
import { meterGatewayAnswers, type GatewayMetrics } from './metrics-hooks';
import { proxyRequest, type ProxyDeps } from './proxy';
import { estimateTokens, type QuotaKeeper, type QuotaRefusal } from './quota';
import { checkRequest, PROXIED } from './request-check';
import type { RoutableReplica, RoutingTable } from './routing';
import { UsageMeter } from './usage-meter';

declare module 'fastify' {
  interface FastifyRequest {
    /** The stored key the request came with (null: a static key, or no key checking) */
    apiKey: KeyRecord | null;
  }
}

/** Options of the gateway plugin. */
export interface GatewayAppOptions {
  routing: RoutingTable;
  /** Accepted bearer keys when `keys` is not given; empty = no authentication (tests of routing only). */
  apiKeys: string[];
  /** The key store's copy (it also holds server.yaml's static keys): every request but /health needs a key. */
  keys?: KeyTable;
  /** Per-key quotas and usage, for stored keys with rpm or tpm. */
  quota?: QuotaKeeper;
  /** Upstream connection pool; by default one keep-alive agent owned (and destroyed) by the app. */
  agent?: Agent;
  /** The keep-alive TLS pool to the nodes' doors (door-agent.ts); absent: a route behind a door cannot be used */
  doorAgent?: DoorAgent;
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
  /** Per-model request counts and TTFT for the cluster page; none = nothing counted. */
  stats?: ModelStats;
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

/** Answers a quota refusal: 429, Retry-After, OpenAI's rate_limit_exceeded; counted in the key's usage. */
function refuseQuota(
  reply: FastifyReply,
  quota: QuotaKeeper,
  key: KeyRecord,
  model: string,
  r: QuotaRefusal,
): FastifyReply {
  quota.refused(key, model);
  reply.header('retry-after', String(r.retryAfterS));
  return sendError(reply, r.code, r.message);
}

/** Once an answer ended: the tokens it reported (or, for a stream without usage, its events) settle the quota. */
function settleUsage(
  quota: QuotaKeeper,
  key: KeyRecord,
  model: string,
  minute: number,
  estimate: number,
  res: ServerResponse,
  meter: UsageMeter,
  bodyBytes: number,
): void {
  if (res.statusCode !== 200) return quota.settle(key, model, minute, estimate, 0, 0);
  const reported = meter.reported();
  if (reported) return quota.settle(key, model, minute, estimate, reported.prompt, reported.completion, true);
  const sse = String(res.getHeader('content-type')).startsWith('text/event-stream');
  // Without a usage object: a stream is counted by its events, anything else is taken to have used its estimate.
  if (sse) return quota.settle(key, model, minute, estimate, Math.ceil(bodyBytes / 4), meter.eventCount());
  quota.settle(key, model, minute, estimate, estimate, 0);
}

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
    const deps: ProxyDeps = { routing, agent, doorAgent: opts.doorAgent, log, timeouts, stats: opts.stats, metrics };
    const authorized = new Set(opts.apiKeys.map((k) => `Bearer ${k}`));
    const { keys, quota } = opts;
    app.decorateRequest('apiKey', null);
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
      meter?: UsageMeter,
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
        // The key label: a stored key's name; a static key (or none) by a short hash of its header.
        key: metrics ? (req.apiKey?.name ?? metrics.keyIdOf(req.headers.authorization)) : undefined,
        times,
        meter,
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
      if (keys) {
        if (req.url === '/health' || req.method === 'OPTIONS') return done();
        const auth = keys.authenticate(h);
        if (auth.kind === 'refused') return void sendError(reply, 'LLMGW_INVALID_API_KEY', auth.message);
        if (auth.kind === 'key') req.apiKey = auth.key;
        return done();
      }
      if (authorized.size > 0 && req.url !== '/health' && req.method !== 'OPTIONS' && (!h || !authorized.has(h))) {
        return void sendError(
          reply,
          'LLMGW_INVALID_API_KEY',
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
      app.post(path, { schema: { response: errorResponses } }, async (req: FastifyRequest, reply: FastifyReply) => {
        const body = (req.body as Buffer | undefined) ?? Buffer.alloc(0);
        const checked = checkRequest(path, body);
        if (checked.kind === 'error') return sendError(reply, 'LLMGW_BAD_REQUEST', checked.message);
        const { model } = checked;
        if (metrics) req.inferenceModel = model;
        const note = notes?.get(req.raw);
        if (note) note.model = model;
        const key = req.apiKey;
        if (key && key.models !== null && !key.models.includes(model))
          return sendError(
            reply,
            'LLMGW_MODEL_NOT_ALLOWED',
            scopeRefusal(key, model, (m) => routing.models().includes(m)) as string,
          );
        // An engine that cannot embed answers 404 or 501 in its own words; the gateway knows it from the catalog.
        const refusal = path === '/v1/embeddings' ? routing.embeddingRefusal(model) : null;
        if (refusal)
          return sendError(
            reply,
            'LLMGW_ENDPOINT_UNSUPPORTED',
            `model ${quoteInput(model)} cannot serve /v1/embeddings: ${refusal}`,
          );
        // A keyed policy's key: a hash of the session id or of the prompt's first bytes (bounded), nothing more read.
        const how = routing.routingOf(model);
        const affinity =
          how && byKey(how.policy)
            ? affinityKey(how, { body, prompt: checked.prompt, user: checked.user, headers: req.headers })
            : null;
        let picked = admission.pick(model, affinity);
        // The key's quota, once the model is served here (an unknown model costs none) and before any wait in the
        // queue (a request over its quota never holds a place there).
        let meter: UsageMeter | undefined;
        if (key && quota && (picked.kind === 'ok' || picked.kind === 'busy')) {
          const estimate =
            key.tpm === null
              ? 0
              : quota.estimate(key, estimateTokens(body.length, checked.maxTokens, path === '/v1/embeddings'));
          const minute = quota.minute();
          const taken = quota.take(key, estimate);
          const refused = taken === null ? null : 'then' in taken ? await taken : taken;
          if (refused) return refuseQuota(reply, quota, key, model, refused);
          // A client that left while its request waited on a lease: give the estimate back, send nothing.
          if (reply.raw.destroyed) {
            quota.settle(key, model, minute, estimate, 0, 0);
            reply.hijack();
            return reply;
          }
          const m = new UsageMeter();
          meter = m;
          reply.raw.once('close', () => settleUsage(quota, key, model, minute, estimate, reply.raw, m, body.length));
          // After a wait on a lease, the replicas may have changed: pick again.
          if (taken !== null) picked = admission.pick(model, affinity);
        }
        switch (picked.kind) {
          case 'unknown-model': {
            const known = routing.models();
            const scoped = key?.models ? `; key ${key.name} may use ${key.models.join(', ')}` : '';
            return sendError(
              reply,
              'LLMGW_UNKNOWN_MODEL',
              key?.models
                ? `model ${quoteInput(model)} no longer exists (it was removed from the catalog)${scoped}; available models: ${known.filter((m) => key.models?.includes(m)).join(', ') || 'none of them'}`
                : `model ${quoteInput(model)} does not exist; available models: ${known.length ? known.join(', ') : 'none'}`,
            );
          }
          case 'none-ready':
            return sendError(reply, 'LLMGW_NO_READY_REPLICA', picked.reason);
          case 'ok':
            forward(req, reply, model, path, body, picked.replica, picked.firstByteMs, note, 0, meter);
            return reply;
          case 'busy': {
            const since = performance.now();
            return admission.wait(model, admissionKeyOf(req), reply, (replica, firstByteMs) =>
              forward(req, reply, model, path, body, replica, firstByteMs, note, performance.now() - since, meter),
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
