/**
 * The control plane's weights routes: agents report the whole files of their caches and ask which peers hold a
 * file; an agent's weights endpoint asks whether a client certificate is still honoured; the operator lists the
 * copies (`llmgw ctl weights`). Agent routes know a node only by its certificate's CN (nodeIdentity).
 */
import type { FastifyInstance } from 'fastify';
import { openAiError } from '../../lib/errors';
import type { Store } from '../../lib/store/store';
import { WeightsStore, type WeightCopyReport } from '../../lib/store/weights';
import type { CertificateStatus, WeightsPeer } from './contract';
import { answerErrors } from '../errors';
import { errorSchema, identify, type ControlLog } from './identity';
import { nodeIdSchema } from './schemas';

const KEY = '^(sha256-[0-9a-f]{64}|url-[0-9a-f]{32})$';
const fileSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['key', 'url', 'size', 'sha256', 'verified', 'storedAt'],
  properties: {
    key: { type: 'string', pattern: KEY },
    url: { type: 'string', minLength: 1, maxLength: 2048 },
    size: { type: 'integer', minimum: 0 },
    sha256: { type: 'string', pattern: '^[0-9a-f]{64}$' },
    verified: { type: 'boolean' },
    storedAt: { type: 'string', maxLength: 64 },
  },
} as const;

/** Registers the weights routes on `app` (a plugin of the control server, behind its mTLS gate). */
export async function weightsRoutes(app: FastifyInstance, opts: { store: Store; log?: ControlLog }): Promise<void> {
  const weights = new WeightsStore(opts.store.pool);
  const log = opts.log ?? ((): void => undefined);
  answerErrors(app, log);

  app.post<{ Body: { nodeId: string; endpoint: string; files: WeightCopyReport[]; replace: boolean } }>(
    '/v1/agent/weights',
    {
      schema: {
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['nodeId', 'endpoint', 'files', 'replace'],
          properties: {
            nodeId: nodeIdSchema,
            endpoint: { type: 'string', pattern: '^https://', maxLength: 256 },
            files: { type: 'array', maxItems: 4096, items: fileSchema },
            replace: { type: 'boolean' },
          },
        },
        response: { 400: errorSchema, 403: errorSchema },
      },
    },
    async (req, reply) => {
      const id = identify(req, reply, req.body.nodeId, log);
      if (!id) return reply;
      await weights.report(id, req.body.endpoint, req.body.files, req.body.replace);
      return { ok: true, files: req.body.files.length };
    },
  );

  app.get<{ Querystring: { node: string; key: string } }>(
    '/v1/agent/weights/peers',
    {
      schema: {
        querystring: {
          type: 'object',
          additionalProperties: false,
          required: ['node', 'key'],
          properties: { node: nodeIdSchema, key: { type: 'string', pattern: KEY } },
        },
        response: { 400: errorSchema, 403: errorSchema },
      },
    },
    async (req, reply) => {
      const id = identify(req, reply, req.query.node, log);
      if (!id) return reply;
      const peers: WeightsPeer[] = (await weights.peersFor(req.query.key, id)).map((c) => ({
        nodeId: c.nodeId,
        endpoint: c.endpoint,
        sha256: c.sha256,
        size: c.size,
      }));
      return { peers };
    },
  );

  // A node's weights endpoint has no MySQL: it asks here whether a client certificate is recorded, unrevoked and valid.
  app.get<{ Querystring: { serial: string } }>(
    '/v1/agent/certificate-status',
    {
      schema: {
        querystring: {
          type: 'object',
          additionalProperties: false,
          required: ['serial'],
          properties: { serial: { type: 'string', pattern: '^[0-9a-fA-F]{1,64}$' } },
        },
      },
    },
    async (req, reply) => {
      if (req.peer?.role !== 'node')
        return reply.code(403).send(openAiError('LLMGW_CERT_REFUSED', 'only a node may ask'));
      const c = await opts.store.certificateBySerial(req.query.serial.toLowerCase());
      const honoured = c !== null && !c.revokedAt && c.notAfter.getTime() > Date.now();
      const status: CertificateStatus = { honoured, cn: c?.cn ?? null };
      return status;
    },
  );

  app.get('/v1/weights', async () => ({ copies: await weights.list() }));
}
