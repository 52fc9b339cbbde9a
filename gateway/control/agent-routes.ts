/**
 * The control API's agent routes (a node certificate only): registration, heartbeat (kept in memory, written to
 * MySQL only now and then: node-beats.ts), the shards placed on the node, and certificate renewal. A node is known only by its certificate's CN.
 */
import type { FastifyInstance } from 'fastify';
import { type LlmgwError, openAiError } from '../../lib/errors';
import { answerErrors } from '../errors';
import type { HeartbeatAnswer, NodeTemporal, Registration, RegisterRequest, RenewRequest } from './contract';
import { errorSchema, identify } from './identity';
import type { ControlAppOptions } from './routes';
import type { NodeBeats } from './node-beats';
import { inventorySchema, nodeIdSchema } from './schemas';

/** The control app's options with the one memory of beats the node list and the page read too (controlRoutes). */
export type AgentRoutesOptions = ControlAppOptions & { beats: NodeBeats };

/** Registers the agent routes on `app`. */
export async function agentRoutes(app: FastifyInstance, opts: AgentRoutesOptions): Promise<void> {
  const { store, beats } = opts;
  const log = opts.log ?? ((): void => undefined);
  answerErrors(app, log);
  // Where this control plane's door is, for the name the agent reached it by (a registration's and a heartbeat's answer).
  const nodeTemporal = (hostname: string): NodeTemporal => {
    const { address, namespace, mtls } = opts.temporal;
    return { address: typeof address === 'string' ? address : address(hostname), namespace, mtls: mtls ?? false };
  };

  app.post<{ Body: RegisterRequest }>(
    '/v1/agent/register',
    {
      schema: {
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['nodeId', 'inventory'],
          properties: { nodeId: nodeIdSchema, inventory: inventorySchema, afterCrash: { type: 'boolean' } },
        },
        response: { 400: errorSchema, 403: errorSchema },
      },
    },
    async (req, reply) => {
      const id = identify(req, reply, req.body.nodeId, log);
      if (!id) return reply;
      const before = await store.nodeState(id);
      await store.upsertNode(id, req.body.inventory);
      beats.registered(id);
      const inv = req.body.inventory;
      await store.event({
        kind: before ? 'node.reregistered' : 'node.registered',
        nodeId: id,
        message: `${inv.gpus.length} GPUs, fabrics ${Object.keys(inv.fabrics).join(',') || 'none (island)'}, engines ${inv.engines.join(',')}`,
      });
      req.log.info({ node: id, gpus: inv.gpus.length, fabrics: inv.fabrics }, 'node registered');
      opts.onNodesChanged?.(id);
      opts.onRegistered?.(id);
      if (before && req.body.afterCrash) opts.onAgentCrashed?.(id);
      const registration: Registration = {
        nodeId: id,
        temporal: nodeTemporal(req.hostname),
        heartbeatMs: opts.heartbeatMs,
      };
      return registration;
    },
  );

  app.post<{ Body: { nodeId: string } }>(
    '/v1/agent/heartbeat',
    {
      schema: {
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['nodeId'],
          properties: { nodeId: nodeIdSchema },
        },
        response: { 400: errorSchema, 403: errorSchema, 404: errorSchema },
      },
    },
    async (req, reply) => {
      const id = identify(req, reply, req.body.nodeId, log);
      if (!id) return reply;
      const answer: HeartbeatAnswer = { ok: true, temporal: nodeTemporal(req.hostname) };
      // Most beats stay in memory: MySQL gets one when another reader needs it (node-beats.ts says when).
      if (!beats.beat(id)) return answer;
      const before = await store.heartbeat(id).catch((err: unknown) => {
        beats.failed(id);
        throw err;
      });
      if (before === null) {
        beats.forget(id);
        return reply.code(404).send(openAiError('LLMGW_UNKNOWN_NODE', `node ${id} is not registered: register first`));
      }
      beats.written(id);
      if (before === 'down') opts.onNodesChanged?.(id);
      return answer;
    },
  );

  // What an agent asks at start: the shards placed on it, so it stops the engines no shard wants any more.
  app.get<{ Querystring: { node: string } }>(
    '/v1/agent/shards',
    {
      schema: {
        querystring: {
          type: 'object',
          additionalProperties: false,
          required: ['node'],
          properties: { node: nodeIdSchema },
        },
        response: {
          200: {
            type: 'object',
            required: ['shards'],
            properties: {
              shards: {
                type: 'array',
                items: {
                  type: 'object',
                  required: ['replicaId', 'rank', 'port'],
                  properties: { replicaId: { type: 'string' }, rank: { type: 'integer' }, port: { type: 'integer' } },
                },
              },
            },
          },
          400: errorSchema,
          403: errorSchema,
        },
      },
    },
    async (req, reply) => {
      const id = identify(req, reply, req.query.node, log);
      if (!id) return reply;
      const shards = (await store.listShards()).filter((s) => s.nodeId === id);
      return { shards: shards.map(({ replicaId, rank, port }) => ({ replicaId, rank, port })) };
    },
  );
  // Renewal over the node's current connection: the new certificate's CN is the connection's, whatever the CSR says.
  const { renew } = opts;
  if (renew) {
    app.post<{ Body: RenewRequest }>(
      '/v1/agent/renew',
      {
        schema: {
          body: {
            type: 'object',
            additionalProperties: false,
            required: ['nodeId', 'csr'],
            properties: { nodeId: nodeIdSchema, csr: { type: 'string', maxLength: 16_384 } },
          },
          response: { 400: errorSchema, 403: errorSchema, 503: errorSchema },
        },
      },
      async (req, reply) => {
        const id = identify(req, reply, req.body.nodeId, log);
        if (!id) return reply;
        try {
          const c = await renew({ csrPem: req.body.csr, identity: id, presentedSerial: req.peer?.serial ?? '' });
          log('certificate renewed', { cn: id, serial: c.serial, previous: req.peer?.serial, notAfter: c.notAfter });
          return c;
        } catch (err) {
          const e = err as LlmgwError;
          // The CA worker not answering is said as such (503): the agent retries, its certificate still valid.
          if (!e.code || (e.status >= 500 && e.code !== 'LLMGW_CA_UNAVAILABLE')) throw err;
          log(e.code === 'LLMGW_CA_UNAVAILABLE' ? 'certificate renewal failed' : 'certificate renewal refused', {
            cn: id,
            serial: req.peer?.serial,
            error: e.message,
          });
          return reply.code(e.status).send(openAiError(e.code, e.message));
        }
      },
    );
  }
}
