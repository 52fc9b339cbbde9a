/**
 * The control API's operator routes (an operator certificate): the node list, cordon and uncordon, ending a drain, revocation,
 * and the read API the CLI uses (replicas, models, events).
 */
import type { FastifyInstance } from 'fastify';
import { openAiError, type LlmgwError } from '../../lib/errors';
import { renewAt } from '../../lib/pki/issue';
import { checkNodeId } from '../../lib/pki/node-id';
import type { NodeId } from '../../lib/types';
import type { CordonAnswer, DrainCancelAnswer, ModelListEntry, NodeCertificate, NodeListEntry } from './contract';
import { answerValidationErrors, errorSchema } from './identity';
import type { ControlAppOptions } from './routes';

/** Registers the operator routes on `app`. */
export async function operatorRoutes(app: FastifyInstance, opts: ControlAppOptions): Promise<void> {
  const { store } = opts;
  answerValidationErrors(app);

  app.get('/v1/nodes', async () => {
    const [nodes, shards, certs] = await Promise.all([store.listNodes(), store.listShards(), store.listCertificates()]);
    // Newest first: a node's newest unrevoked node certificate is the one it should be presenting.
    const certOf = (id: string): NodeCertificate | null => {
      const mine = certs.filter((c) => c.cn === id && c.role === 'node');
      const c = mine.find((x) => !x.revokedAt) ?? mine[0];
      return c ? { serial: c.serial, notAfter: c.notAfter.toISOString(), renewAt: renewAt(c.notBefore, c.notAfter).toISOString(), revoked: !!c.revokedAt } : null;
    };
    return {
      nodes: nodes.map((n): NodeListEntry => ({
        ...n,
        cert: certOf(n.id),
        replicas: [...new Set(shards.filter((s) => s.nodeId === n.id).map((s) => s.replicaId))],
        gpusUsed: shards.filter((s) => s.nodeId === n.id).reduce((a, s) => a + s.gpus.length, 0),
        gpuShards: shards.filter((s) => s.nodeId === n.id && s.gpus.length).map(({ replicaId, rank, gpus }) => ({ replicaId, rank, gpus })),
      })),
    };
  });
  // Operator actions on a node. Cordon state lives in MySQL, so it survives restarts and re-registration.
  for (const [verb, state] of [['cordon', 'cordoned'], ['uncordon', 'ready']] as const) {
    app.post<{ Params: { id: string } }>(`/v1/nodes/:id/${verb}`, {
      schema: { params: { type: 'object', required: ['id'], properties: { id: { type: 'string' } } }, response: { 404: errorSchema, 409: errorSchema } },
    }, async (req, reply) => {
      const id = req.params.id;
      const before = await store.nodeState(id as NodeId);
      if (before === null) return reply.code(404).send(openAiError('LLMGW_UNKNOWN_NODE', `node ${id} is not registered: see llmgw ctl nodes`));
      // Uncordoning gives the node back: a drain still moving replicas off it ends first (its move is given back).
      const drainEnded = verb === 'uncordon' && opts.endDrain ? await opts.endDrain(id as NodeId) : undefined;
      // A down node can be cordoned too: it then comes back cordoned when its agent is seen again.
      const changed = (await store.isCordoned(id)) !== (state === 'cordoned');
      if (changed) {
        await store.setNodeState(id, state);
        await store.event({ kind: `node.${state}`, nodeId: id, message: `${verb} by operator${before === 'down' ? ' (node down: applies when it is back)' : ''}` });
        if (state === 'ready' && before !== 'down') opts.onNodesChanged?.(id);
      }
      return { nodeId: id, state: (await store.nodeState(id as NodeId)) ?? state, changed, ...(drainEnded === undefined ? {} : { drainEnded }) } satisfies CordonAnswer;
    });
  }
  const { endDrain } = opts;
  if (endDrain) {
    app.post<{ Params: { id: string } }>('/v1/nodes/:id/drain/cancel', {
      schema: { params: { type: 'object', required: ['id'], properties: { id: { type: 'string' } } }, response: { 404: errorSchema } },
    }, async (req, reply) => {
      const id = req.params.id;
      if ((await store.nodeState(id as NodeId)) === null) return reply.code(404).send(openAiError('LLMGW_UNKNOWN_NODE', `node ${id} is not registered: see llmgw ctl nodes`));
      return { nodeId: id, drain: await endDrain(id as NodeId) } satisfies DrainCancelAnswer;
    });
  }
  const { revoke } = opts;
  if (revoke) {
    app.post<{ Params: { id: string }; Body: { reason?: string } | undefined }>('/v1/nodes/:id/revoke', {
      schema: { params: { type: 'object', required: ['id'], properties: { id: { type: 'string' } } }, response: { 400: errorSchema } },
    }, async (req, reply) => {
      const id = req.params.id;
      const reason = req.body?.reason ?? `revoked by operator ${req.peer?.cn ?? '(unknown)'}`;
      let revoked: number;
      try {
        revoked = await revoke(checkNodeId(id), reason);
      } catch (err) {
        const e = err as LlmgwError;
        if (!e.code || e.status >= 500) throw err;
        return reply.code(400).send(openAiError(e.code, e.message));
      }
      await store.event({ kind: 'node.revoked', nodeId: id, message: `${revoked} certificate${revoked === 1 ? '' : 's'} revoked: ${reason}` });
      return { nodeId: id, revoked };
    });
  }
  app.get<{ Querystring: { model?: string } }>('/v1/replicas', async (req) => ({ replicas: await store.listReplicas(req.query.model) }));
  app.get('/v1/models', async () => {
    const [models, replicas] = await Promise.all([store.listModels(), store.listReplicas()]);
    const count = (into: Record<string, number>, key: string): void => void (into[key] = (into[key] ?? 0) + 1);
    return {
      models: models.map((m): ModelListEntry => {
        const actual: ModelListEntry['actual'] = { states: {}, profiles: {} };
        for (const r of replicas.filter((x) => x.model === m.name && x.state !== 'stopped')) {
          count(actual.states, r.state);
          count(actual.profiles, r.profile);
        }
        return { ...m, actual };
      }),
    };
  });
  app.get('/v1/events', async () => ({ events: await store.recentEvents(100) }));
  app.get('/health', async () => ({ status: 'ok' }));
}
