/**
 * The control API's operator routes (an operator certificate): the node list, cordon and uncordon, ending a drain, revocation,
 * and the read API the CLI uses (replicas, models, events).
 */
import type { FastifyInstance } from 'fastify';
import { LlmgwError } from '../../lib/errors';
import { DrainStore, lagsOf } from '../../lib/store/drain';
import { checkNodeId } from '../../lib/pki/node-id';
import { PageAuthStore } from '../../lib/store/page-auth';
import { answerErrors } from '../errors';
import type {
  CordonAnswer,
  DrainCancelAnswer,
  ModelListEntry,
  ModelRoutingAnswer,
  PageKeyCreated,
  RevokeAnswer,
} from './contract';
import { errorSchema } from './identity';
import { knownNode as knownNodeOf, listEntry, nodeList, revokeNode, setCordon, unknownNode } from './node-actions';
import type { ControlAppOptions } from './routes';

/** The path parameter of every /v1/nodes/:id route, with bounds; its alphabet is checked by knownNode/checkNodeId. */
const idParams = {
  type: 'object',
  additionalProperties: false,
  required: ['id'],
  properties: { id: { type: 'string', maxLength: 64 } },
} as const;

/** Registers the operator routes on `app`. */
export async function operatorRoutes(app: FastifyInstance, opts: ControlAppOptions): Promise<void> {
  const { store } = opts;
  answerErrors(app, opts.log ?? ((): void => undefined));

  const knownNode = (raw: string): ReturnType<typeof knownNodeOf> => knownNodeOf(store, raw);

  app.get('/v1/nodes', async () => ({ nodes: await nodeList(store, opts.beats) }));
  app.get<{ Params: { id: string } }>(
    '/v1/nodes/:id',
    { schema: { params: idParams, response: { 400: errorSchema, 404: errorSchema } } },
    async (req) => {
      // The node's own row answers whether it is registered (knownNode would read it once more).
      const id = checkNodeId(req.params.id);
      const [node, shards, certs] = await Promise.all([
        store.node(id),
        store.listShards(),
        store.listCertificates({ cn: id }),
      ]);
      if (!node) throw unknownNode(id);
      return listEntry(node, shards, certs, opts.beats);
    },
  );
  // Operator actions on a node. Cordon state lives in MySQL, so it survives restarts and re-registration.
  for (const verb of ['cordon', 'uncordon'] as const) {
    app.post<{ Params: { id: string } }>(
      `/v1/nodes/:id/${verb}`,
      {
        schema: { params: idParams, response: { 400: errorSchema, 404: errorSchema, 409: errorSchema } },
      },
      async (req): Promise<CordonAnswer> => setCordon(opts, req.params.id, verb),
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
      async (req): Promise<RevokeAnswer> =>
        revokeNode(
          store,
          revoke,
          req.params.id,
          req.body?.reason ?? `revoked by operator ${req.peer?.cn ?? '(unknown)'}`,
        ),
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
  app.get('/v1/models', async () => ({ models: await modelList(store) }));
  // What ctl deploy waits on: each live gateway's last report (written as soon as it applies a pushed change).
  const drains = new DrainStore(store.pool);
  app.get<{ Params: { name: string } }>(
    '/v1/models/:name/routing',
    {
      schema: {
        params: {
          type: 'object',
          additionalProperties: false,
          required: ['name'],
          properties: { name: { type: 'string', minLength: 1, maxLength: 128 } },
        },
        response: { 400: errorSchema },
      },
    },
    async (req): Promise<ModelRoutingAnswer> => {
      const [replicas, reports] = await Promise.all([store.listReplicas(req.params.name), drains.liveReports()]);
      const ready = replicas.filter((r) => r.state === 'ready').map((r) => r.id);
      return { model: req.params.name, ready, gateways: lagsOf(reports, ready) };
    },
  );
  app.get('/v1/events', async () => ({ events: await store.recentEvents(100) }));
  // Keys for the cluster page (docs/cluster-page.md): shown once at creation, stored as their SHA-256.
  const keys = new PageAuthStore(store.pool);
  const nameBody = {
    type: 'object',
    additionalProperties: false,
    required: ['name'],
    properties: { name: { type: 'string', pattern: '^[a-z0-9][a-z0-9._-]{0,63}$' } },
  } as const;
  app.post<{ Body: { name: string } }>(
    '/v1/page-keys',
    { schema: { body: nameBody, response: { 400: errorSchema, 409: errorSchema } } },
    async (req): Promise<PageKeyCreated> => {
      const key = await keys.createKey(req.body.name);
      if (key === null)
        throw new LlmgwError(
          'LLMGW_PAGE_KEY_EXISTS',
          `a page key named ${req.body.name} exists already: pick another name, or revoke it first (llmgw ctl page-key revoke ${req.body.name})`,
          { name: req.body.name },
        );
      await store.event({
        kind: 'page-key.created',
        message: `page key ${req.body.name} created by ${req.peer?.cn ?? 'operator'}`,
      });
      return { name: req.body.name, key };
    },
  );
  app.get('/v1/page-keys', async () => ({ keys: await keys.listKeys() }));
  app.post<{ Body: { name: string } }>(
    '/v1/page-keys/revoke',
    { schema: { body: nameBody, response: { 400: errorSchema, 404: errorSchema } } },
    async (req) => {
      if (!(await keys.revokeKey(req.body.name)))
        throw new LlmgwError(
          'LLMGW_NOT_FOUND',
          `no unrevoked page key named ${req.body.name}: see llmgw ctl page-key list`,
          {
            name: req.body.name,
          },
        );
      await store.event({
        kind: 'page-key.revoked',
        message: `page key ${req.body.name} revoked by ${req.peer?.cn ?? 'operator'}`,
      });
      return { name: req.body.name, revoked: true };
    },
  );
  app.get('/health', async () => ({ status: 'ok' }));
}

/** Every model with what runs of it, as GET /v1/models lists them. */
export async function modelList(store: ControlAppOptions['store']): Promise<ModelListEntry[]> {
  const [models, replicas] = await Promise.all([store.listModels(), store.listReplicas()]);
  const count = (into: Record<string, number>, key: string): void => void (into[key] = (into[key] ?? 0) + 1);
  return models.map((m): ModelListEntry => {
    const actual: ModelListEntry['actual'] = { states: {}, profiles: {} };
    for (const r of replicas.filter((x) => x.model === m.name && x.state !== 'stopped')) {
      count(actual.states, r.state);
      count(actual.profiles, r.profile);
    }
    return { ...m, actual };
  });
}
