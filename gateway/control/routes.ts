/** The control plane's HTTP API: agent registration and heartbeat, and the read API the CLI uses. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { LlmgwError, openAiError, type ErrorCode } from '../../lib/errors';
import { renewAt } from '../../lib/pki/issue';
import { checkNodeId } from '../../lib/pki/node-id';
import type { Store } from '../../lib/store/store';
import { DOCTOR_STATUSES, parseNodeId, type NodeId, type NodeInventory } from '../../lib/types';

export interface ControlAppOptions {
  store: Store;
  /**
   * What the agent gets back: where its worker connects — a fixed address, or one made from the host the agent
   * reached the control plane at (the door's, on the control plane's host) — and whether with its node
   * certificate (`mtls`, the door) or in plain gRPC (a Temporal the node may reach directly: tests).
   */
  temporal: { address: string | ((requestHost: string) => string); namespace: string; mtls?: boolean };
  heartbeatMs: number;
  /** Where a refused identity claim is logged (one line: the CN, the claimed id and the reason). */
  log?: (msg: string, fields: Record<string, unknown>) => void;
  /** Revokes every certificate of a node, and cuts its open connections (`POST /v1/nodes/:id/revoke`). */
  revoke?: (nodeId: string, reason: string) => Promise<number>;
  /**
   * Signs a renewing node's CSR for `identity` (its connection's CN), checking that `presentedSerial` is an
   * unrevoked certificate of that CN (`POST /v1/agent/renew`).
   */
  renew?: (input: { csrPem: string; identity: NodeId; presentedSerial: string }) => Promise<RenewedCertificate>;
  /** Called after a node registers or returns from down, so waiting replicas try placement again. */
  onNodesChanged?: (nodeId: string) => void;
  /** Called after a node (an agent starting) registers: the control plane has it install and probe its engines. */
  onRegistered?: (nodeId: NodeId) => void;
}

/** A node's newest unrevoked certificate as the node list shows it (null: none recorded, or all revoked). */
export interface NodeCertificate {
  serial: string;
  notAfter: string;
  /** two thirds of its lifetime: an agent still on it after this missed its renewal */
  renewAt: string;
  /** true when every certificate of the node is revoked */
  revoked: boolean;
}

/** Where a node's worker reaches Temporal (the registration's answer); `mtls`: with its node certificate, the door. */
export interface NodeTemporal {
  address: string;
  namespace: string;
  mtls: boolean;
}

/** What a renewal returns to the agent. */
export interface RenewedCertificate {
  serial: string;
  certPem: string;
  caPem: string;
  notAfter: string;
  renewAt: string;
}

const inventorySchema = {
  type: 'object',
  required: ['gpus', 'adapters', 'fabrics', 'cpuFlags', 'engines', 'host'],
  properties: {
    gpus: { type: 'array' }, adapters: { type: 'array' }, fabrics: { type: 'object' },
    cpuFlags: { type: 'array', items: { type: 'string' } }, engines: { type: 'array', items: { type: 'string' } },
    host: { type: 'string', minLength: 1 },
    // fabric name -> the subnet manager its ports see (placement splits one name over two SM GUIDs)
    fabricIdentity: {
      type: 'object',
      additionalProperties: {
        type: 'object', required: ['smGuid', 'strength'],
        properties: {
          smGuid: { type: ['string', 'null'], pattern: '^0x[0-9a-f]{16}$' }, strength: { enum: ['sm-guid', 'declared-only'] },
          smLid: { type: ['string', 'null'] }, note: { type: 'string' },
        },
      },
    },
    // the agent's doctor results at start (the node list's CHECKS column)
    doctor: {
      type: 'array',
      items: { type: 'object', required: ['id', 'status', 'summary', 'fix'], properties: { id: { type: 'string', minLength: 1 }, status: { enum: DOCTOR_STATUSES }, summary: { type: 'string' }, fix: { type: 'string' } } },
    },
  },
} as const;

const errorSchema = { type: 'object', properties: { error: { type: 'object', additionalProperties: true } } } as const;

/**
 * The node a request comes from: the CN of its connection's verified client certificate (`req.peer`, set by
 * the mTLS gate), never the body's claim. A claim of another id is refused (LLMGW_CERT_REFUSED, 403).
 */
export function nodeIdentity(req: FastifyRequest, claimed: string): NodeId {
  const peer = req.peer;
  if (!peer || peer.role !== 'node') {
    throw new LlmgwError('LLMGW_CERT_REFUSED', 'agent routes need a node client certificate (mutual TLS)', { cn: peer?.cn ?? null, claimed, reason: 'no node certificate on the connection' });
  }
  if (claimed !== peer.cn) {
    const reason = `the certificate is ${peer.cn}'s; a node speaks only for itself`;
    throw new LlmgwError('LLMGW_CERT_REFUSED', `node id "${claimed}" refused: ${reason}`, { cn: peer.cn, claimed, reason });
  }
  return parseNodeId(peer.cn);
}

/** Registers the control plane routes on `app`. */
export async function controlRoutes(app: FastifyInstance, opts: ControlAppOptions): Promise<void> {
  const { store } = opts;
  // A body the schema refuses gets the error shape every route answers with, naming the field (fastify's own
  // `error: "Bad Request"` string does not fit errorSchema and would be serialised as an object of characters).
  app.setErrorHandler((err: Error & { validation?: unknown }, _req, reply) => {
    if (!err.validation) throw err;
    return reply.code(400).send(openAiError('LLMGW_BAD_REQUEST', err.message));
  });
  const log = opts.log ?? ((): void => undefined);
  const who = (req: FastifyRequest, reply: FastifyReply, claimed: string): NodeId | null => {
    try {
      return nodeIdentity(req, claimed);
    } catch (err) {
      const e = err as LlmgwError;
      const code: ErrorCode = e.code ?? 'LLMGW_BAD_REQUEST';
      if (code === 'LLMGW_CERT_REFUSED') log('node identity refused', { ...e.context, url: req.url.split('?')[0] });
      void reply.code(e.status ?? 400).send(openAiError(code, e.message));
      return null;
    }
  };

  app.post<{ Body: { nodeId: string; inventory: NodeInventory } }>('/v1/agent/register', {
    schema: {
      body: { type: 'object', required: ['nodeId', 'inventory'], properties: { nodeId: { type: 'string' }, inventory: inventorySchema } },
      response: { 400: errorSchema, 403: errorSchema },
    },
  }, async (req, reply) => {
    const id = who(req, reply, req.body.nodeId);
    if (!id) return reply;
    const before = await store.nodeState(id);
    await store.upsertNode(id, req.body.inventory);
    const inv = req.body.inventory;
    await store.event({ kind: before ? 'node.reregistered' : 'node.registered', nodeId: id, message: `${inv.gpus.length} GPUs, fabrics ${Object.keys(inv.fabrics).join(',') || 'none (island)'}, engines ${inv.engines.join(',')}` });
    req.log.info({ node: id, gpus: inv.gpus.length, fabrics: inv.fabrics }, 'node registered');
    opts.onNodesChanged?.(id);
    opts.onRegistered?.(id);
    const { address, namespace, mtls } = opts.temporal;
    const temporal: NodeTemporal = { address: typeof address === 'string' ? address : address(req.hostname), namespace, mtls: mtls ?? false };
    return { nodeId: id, temporal, heartbeatMs: opts.heartbeatMs };
  });

  app.post<{ Body: { nodeId: string } }>('/v1/agent/heartbeat', {
    schema: { body: { type: 'object', required: ['nodeId'], properties: { nodeId: { type: 'string' } } } },
  }, async (req, reply) => {
    const id = who(req, reply, req.body.nodeId);
    if (!id) return reply;
    const before = await store.heartbeat(id);
    if (before === null) return reply.code(404).send(openAiError('LLMGW_UNKNOWN_NODE', `node ${id} is not registered: register first`));
    if (before === 'down') opts.onNodesChanged?.(id);
    return { ok: true };
  });

  // What an agent asks at start: the shards placed on it, so it stops the engines no shard wants any more.
  app.get<{ Querystring: { node: string } }>('/v1/agent/shards', {
    schema: {
      querystring: { type: 'object', required: ['node'], properties: { node: { type: 'string' } } },
      response: {
        200: {
          type: 'object', required: ['shards'],
          properties: { shards: { type: 'array', items: { type: 'object', required: ['replicaId', 'rank', 'port'], properties: { replicaId: { type: 'string' }, rank: { type: 'integer' }, port: { type: 'integer' } } } } },
        },
        400: errorSchema,
        403: errorSchema,
      },
    },
  }, async (req, reply) => {
    const id = who(req, reply, req.query.node);
    if (!id) return reply;
    const shards = (await store.listShards()).filter((s) => s.nodeId === id);
    return { shards: shards.map(({ replicaId, rank, port }) => ({ replicaId, rank, port })) };
  });

  app.get('/v1/nodes', async () => {
    const [nodes, shards, certs] = await Promise.all([store.listNodes(), store.listShards(), store.listCertificates()]);
    // Newest first: a node's newest unrevoked node certificate is the one it should be presenting.
    const certOf = (id: string): NodeCertificate | null => {
      const mine = certs.filter((c) => c.cn === id && c.role === 'node');
      const c = mine.find((x) => !x.revokedAt) ?? mine[0];
      return c ? { serial: c.serial, notAfter: c.notAfter.toISOString(), renewAt: renewAt(c.notBefore, c.notAfter).toISOString(), revoked: !!c.revokedAt } : null;
    };
    return {
      nodes: nodes.map((n) => ({
        ...n,
        cert: certOf(n.id),
        replicas: [...new Set(shards.filter((s) => s.nodeId === n.id).map((s) => s.replicaId))],
        gpusUsed: shards.filter((s) => s.nodeId === n.id).reduce((a, s) => a + s.gpus, 0),
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
      // A down node can be cordoned too: it then comes back cordoned when its agent is seen again.
      const changed = (await store.isCordoned(id)) !== (state === 'cordoned');
      if (changed) {
        await store.setNodeState(id, state);
        await store.event({ kind: `node.${state}`, nodeId: id, message: `${verb} by operator${before === 'down' ? ' (node down: applies when it is back)' : ''}` });
        if (state === 'ready' && before !== 'down') opts.onNodesChanged?.(id);
      }
      return { nodeId: id, state: (await store.nodeState(id as NodeId)) ?? state, changed };
    });
  }
  // Renewal over the node's current connection: the new certificate's CN is the connection's, whatever the CSR says.
  const { renew } = opts;
  if (renew) {
    app.post<{ Body: { nodeId: string; csr: string } }>('/v1/agent/renew', {
      schema: { body: { type: 'object', required: ['nodeId', 'csr'], properties: { nodeId: { type: 'string' }, csr: { type: 'string' } } }, response: { 400: errorSchema, 403: errorSchema, 503: errorSchema } },
    }, async (req, reply) => {
      const id = who(req, reply, req.body.nodeId);
      if (!id) return reply;
      try {
        const c = await renew({ csrPem: req.body.csr, identity: id, presentedSerial: req.peer?.serial ?? '' });
        log('certificate renewed', { cn: id, serial: c.serial, previous: req.peer?.serial, notAfter: c.notAfter });
        return c;
      } catch (err) {
        const e = err as LlmgwError;
        // The CA worker not answering is said as such (503): the agent retries, its certificate still valid.
        if (!e.code || (e.status >= 500 && e.code !== 'LLMGW_CA_UNAVAILABLE')) throw err;
        log(e.code === 'LLMGW_CA_UNAVAILABLE' ? 'certificate renewal failed' : 'certificate renewal refused', { cn: id, serial: req.peer?.serial, error: e.message });
        return reply.code(e.status).send(openAiError(e.code, e.message));
      }
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
  app.get('/v1/models', async () => ({ models: await store.listModels() }));
  app.get('/v1/events', async () => ({ events: await store.recentEvents(100) }));
  app.get('/health', async () => ({ status: 'ok' }));
}
