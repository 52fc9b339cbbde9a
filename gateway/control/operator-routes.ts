/**
 * The control API's operator routes (an operator certificate): the node list, cordon and uncordon, ending a drain, revocation,
 * and the read API the CLI uses (replicas, models, events).
 */
import type { FastifyInstance } from 'fastify';
import { LlmgwError } from '../../lib/errors';
import { renewAt } from '../../lib/pki/issue';
import { checkNodeId } from '../../lib/pki/node-id';
import { cutRevocationReason, type CertificateRecord, type ShardRow } from '../../lib/store/store';
import type { NodeId, NodeRecord } from '../../lib/types';
import { answerErrors } from '../errors';
import type {
  CordonAnswer,
  DrainCancelAnswer,
  ModelListEntry,
  NodeCertificate,
  NodeListEntry,
  RevokeAnswer,
} from './contract';
import { errorSchema } from './identity';
import type { ControlAppOptions } from './routes';

/** The path parameter of every /v1/nodes/:id route, with bounds; its alphabet is checked by knownNode/checkNodeId. */
const idParams = {
  type: 'object',
  additionalProperties: false,
  required: ['id'],
  properties: { id: { type: 'string', maxLength: 64 } },
} as const;

/** A node as the node list shows it: its certificate (newest unrevoked first), its replicas and GPUs in use. */
function listEntry(n: NodeRecord, shards: ShardRow[], certs: CertificateRecord[]): NodeListEntry {
  const mine = certs.filter((c) => c.cn === n.id && c.role === 'node');
  const c = mine.find((x) => !x.revokedAt) ?? mine[0];
  const cert: NodeCertificate | null = c
    ? {
        serial: c.serial,
        notAfter: c.notAfter.toISOString(),
        renewAt: renewAt(c.notBefore, c.notAfter).toISOString(),
        revoked: !!c.revokedAt,
      }
    : null;
  const on = shards.filter((s) => s.nodeId === n.id);
  return {
    ...n,
    cert,
    replicas: [...new Set(on.map((s) => s.replicaId))],
    gpusUsed: on.reduce((a, s) => a + s.gpus.length, 0),
    gpuShards: on.filter((s) => s.gpus.length).map(({ replicaId, rank, gpus }) => ({ replicaId, rank, gpus })),
  };
}

/** Registers the operator routes on `app`. */
export async function operatorRoutes(app: FastifyInstance, opts: ControlAppOptions): Promise<void> {
  const { store } = opts;
  answerErrors(app, opts.log ?? ((): void => undefined));

  /**
   * The node a route's `:id` names, checked the one way every route checks it: the node-id alphabet exactly
   * (MariaDB would match `SIM-A` and `sim-a ` to `sim-a`), then registered — else 400 LLMGW_BAD_NODE_ID or 404.
   */
  const knownNode = async (
    raw: string,
  ): Promise<{ id: NodeId; state: NonNullable<Awaited<ReturnType<typeof store.nodeState>>> }> => {
    const id = checkNodeId(raw);
    const state = await store.nodeState(id);
    if (state === null)
      throw new LlmgwError('LLMGW_UNKNOWN_NODE', `node ${id} is not registered: see llmgw ctl nodes`, { nodeId: id });
    return { id, state };
  };

  app.get('/v1/nodes', async () => {
    const [nodes, shards, certs] = await Promise.all([store.listNodes(), store.listShards(), store.listCertificates()]);
    return { nodes: nodes.map((n) => listEntry(n, shards, certs)) };
  });
  app.get<{ Params: { id: string } }>(
    '/v1/nodes/:id',
    { schema: { params: idParams, response: { 400: errorSchema, 404: errorSchema } } },
    async (req) => {
      const { id } = await knownNode(req.params.id);
      const [nodes, shards, certs] = await Promise.all([
        store.listNodes(),
        store.listShards(),
        store.listCertificates({ cn: id }),
      ]);
      return listEntry(nodes.find((n) => n.id === id) as NodeRecord, shards, certs);
    },
  );
  // Operator actions on a node. Cordon state lives in MySQL, so it survives restarts and re-registration.
  for (const [verb, state] of [
    ['cordon', 'cordoned'],
    ['uncordon', 'ready'],
  ] as const) {
    app.post<{ Params: { id: string } }>(
      `/v1/nodes/:id/${verb}`,
      {
        schema: { params: idParams, response: { 400: errorSchema, 404: errorSchema, 409: errorSchema } },
      },
      async (req) => {
        const { id, state: before } = await knownNode(req.params.id);
        // Uncordoning gives the node back: a drain still moving replicas off it ends first (its move is given back).
        const drainEnded = verb === 'uncordon' && opts.endDrain ? await opts.endDrain(id) : undefined;
        // A down node can be cordoned too: it then comes back cordoned when its agent is seen again.
        const changed = (await store.isCordoned(id)) !== (state === 'cordoned');
        if (changed) {
          await store.setNodeState(id, state);
          await store.event({
            kind: `node.${state}`,
            nodeId: id,
            message: `${verb} by operator${before === 'down' ? ' (node down: applies when it is back)' : ''}`,
          });
          if (state === 'ready' && before !== 'down') opts.onNodesChanged?.(id);
        }
        return {
          nodeId: id,
          state: (await store.nodeState(id)) ?? state,
          changed,
          ...(drainEnded === undefined ? {} : { drainEnded }),
        } satisfies CordonAnswer;
      },
    );
  }
  const { endDrain } = opts;
  if (endDrain) {
    app.post<{ Params: { id: string } }>(
      '/v1/nodes/:id/drain/cancel',
      {
        schema: { params: idParams, response: { 400: errorSchema, 404: errorSchema } },
      },
      async (req) => {
        const { id } = await knownNode(req.params.id);
        return { nodeId: id, drain: await endDrain(id) } satisfies DrainCancelAnswer;
      },
    );
  }
  const { revoke } = opts;
  if (revoke) {
    // An emergency tool: it revokes whatever the reason's length, recording the reason cut to what the store holds.
    // A node that was issued a certificate but never registered (a failed onboarding) can be revoked too.
    app.post<{ Params: { id: string }; Body: { reason?: string } | undefined }>(
      '/v1/nodes/:id/revoke',
      {
        schema: {
          params: idParams,
          body: { type: ['object', 'null'], additionalProperties: false, properties: { reason: { type: 'string' } } },
          response: { 400: errorSchema, 404: errorSchema },
        },
      },
      async (req) => {
        const id = checkNodeId(req.params.id);
        if ((await store.nodeState(id)) === null && (await store.listCertificates({ cn: id })).length === 0) {
          throw new LlmgwError(
            'LLMGW_UNKNOWN_NODE',
            `no node ${id} is registered and no certificate was issued to it: see llmgw ctl nodes`,
            { nodeId: id },
          );
        }
        const { reason, cut } = cutRevocationReason(
          req.body?.reason ?? `revoked by operator ${req.peer?.cn ?? '(unknown)'}`,
        );
        const revoked = await revoke(id, reason);
        await store.event({
          kind: 'node.revoked',
          nodeId: id,
          message: `${revoked} certificate${revoked === 1 ? '' : 's'} revoked: ${reason}`,
        });
        return { nodeId: id, revoked, reason, reasonCut: cut } satisfies RevokeAnswer;
      },
    );
  }
  app.get<{ Querystring: { model?: string } }>(
    '/v1/replicas',
    {
      schema: {
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { model: { type: 'string', minLength: 1, maxLength: 128 } },
        },
        response: { 400: errorSchema },
      },
    },
    async (req) => ({ replicas: await store.listReplicas(req.query.model) }),
  );
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
