/** The inference gateway's OpenAI-compatible API as a fastify plugin: models, completions, embeddings, health. */
import { Agent, type IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { DEFAULT_CONFIG } from '../../config/defaults';
import type { GatewayTimeouts } from '../../config/types';
import { ERRORS, openAiError, type ErrorCode } from '../../lib/errors';
import { accessLine, silentLog, type AccessNote, type GatewayLog } from './log';
import { proxyRequest, type ProxyDeps } from './proxy';
import type { RoutingTable } from './routing';

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
}

/** The request body as the client sent it, and the JSON parsed once to read `model`. */
interface RawJson {
  raw: Buffer;
  value?: unknown;
  error?: string;
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

const PROXIED = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings'] as const;

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
    const deps: ProxyDeps = { routing, agent, log, timeouts };
    const authorized = new Set(opts.apiKeys.map((k) => `Bearer ${k}`));
    const notes = opts.accessLog ? new WeakMap<IncomingMessage, AccessNote>() : null;
    const created = Math.floor(Date.now() / 1000);

    app.setErrorHandler((err: Error & { statusCode?: number }, req, reply) => {
      const status = err.statusCode ?? 500;
      if (status >= 500) log('gateway error', { level: 'error', reqId: req.id, error: err.message });
      return reply.code(status).send({
        error: {
          message: err.message,
          type: status < 500 ? 'invalid_request_error' : 'server_error',
          code: status < 500 ? 'LLMGW_BAD_REQUEST' : 'LLMGW_UPSTREAM_FAILED',
        },
      });
    });

    // Keep the raw bytes to forward untouched; parse once here only to learn the model. Never fail in the
    // parser, so a malformed body gets the OpenAI error shape from the route instead of fastify's.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser(
      '*',
      { parseAs: 'buffer', bodyLimit: opts.bodyLimit ?? 32 * 1024 * 1024 },
      (_req, raw, done) => {
        const buf = raw as Buffer;
        try {
          done(null, { raw: buf, value: JSON.parse(buf.toString('utf8')) } satisfies RawJson);
        } catch (err) {
          done(null, {
            raw: buf,
            error:
              buf.length === 0
                ? 'the request body is empty'
                : `the request body is not valid JSON: ${(err as Error).message}`,
          } satisfies RawJson);
        }
      },
    );

    // One hook for every request, and a callback one: cheaper per request than an async hook.
    app.addHook('onRequest', (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
      reply.raw.setHeader('x-request-id', req.id);
      if (notes) notes.set(req.raw, accessLine(log, req.id, req.raw, reply.raw));
      const h = req.headers.authorization;
      if (authorized.size > 0 && req.url !== '/health' && (!h || !authorized.has(h))) {
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

    for (const path of PROXIED) {
      app.post(path, { schema: { response: errorResponses } }, async (req: FastifyRequest, reply: FastifyReply) => {
        const body = req.body as RawJson | undefined;
        if (!body)
          return sendError(reply, 'LLMGW_BAD_REQUEST', 'the request body must be a JSON object with a "model" field');
        if (body.error) return sendError(reply, 'LLMGW_BAD_REQUEST', body.error);
        const v = body.value;
        if (typeof v !== 'object' || v === null || Array.isArray(v))
          return sendError(reply, 'LLMGW_BAD_REQUEST', 'the request body must be a JSON object');
        const model = (v as { model?: unknown }).model;
        if (typeof model !== 'string' || model === '')
          return sendError(reply, 'LLMGW_BAD_REQUEST', 'the request body needs a string "model" field');
        const note = notes?.get(req.raw);
        if (note) note.model = model;
        const picked = routing.pick(model);
        switch (picked.kind) {
          case 'unknown-model': {
            const known = routing.models();
            return sendError(
              reply,
              'LLMGW_UNKNOWN_MODEL',
              `model "${model}" does not exist; available models: ${known.length ? known.join(', ') : 'none'}`,
            );
          }
          case 'none-ready':
            return sendError(reply, 'LLMGW_NO_READY_REPLICA', picked.reason);
          case 'ok':
            reply.hijack();
            proxyRequest(deps, {
              model,
              path,
              body: body.raw,
              first: picked.replica,
              firstByteMs: picked.firstByteMs ?? timeouts.firstByteMs,
              reqId: req.id,
              req: req.raw,
              res: reply.raw,
              note,
            });
            return reply;
          default: {
            const never: never = picked;
            throw new Error(`unhandled pick ${JSON.stringify(never)}`);
          }
        }
      });
    }
  };
}
