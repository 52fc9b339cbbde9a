/**
 * The control API's key routes (an operator certificate): create, list and revoke inference keys, and read their
 * usage. `llmgw ctl keys create` makes the key on the operator's machine and sends only its SHA-256: the key itself
 * never crosses the network nor reaches a log.
 */
import type { FastifyInstance } from 'fastify';
import { checkKeyName, MAX_QUOTA } from '../../lib/api-keys';
import { LlmgwError } from '../../lib/errors';
import { KeyStore, type KeyListEntry, type KeyUsageRow } from '../../lib/store/keys';
import { answerErrors } from '../errors';
import type { KeyCreateRequest } from './contract';
import { errorSchema } from './identity';
import type { ControlAppOptions } from './routes';

const quota = { type: ['integer', 'null'], minimum: 1, maximum: MAX_QUOTA } as const;
const createSchema = {
  type: 'object',
  required: ['name', 'digest', 'prefix'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', maxLength: 64 },
    digest: { type: 'string', pattern: '^[0-9a-f]{64}$' },
    prefix: { type: 'string', maxLength: 16 },
    models: {
      type: ['array', 'null'],
      minItems: 1,
      maxItems: 1000,
      items: { type: 'string', minLength: 1, maxLength: 128 },
    },
    rpm: quota,
    tpm: quota,
    expiresAt: { type: ['string', 'null'], maxLength: 40 },
  },
} as const;
const nameParams = {
  type: 'object',
  required: ['name'],
  properties: { name: { type: 'string', maxLength: 64 } },
} as const;
const errors = { 400: errorSchema, 404: errorSchema, 409: errorSchema } as const;

/** Registers /v1/keys… on `app`. */
export async function keyRoutes(app: FastifyInstance, opts: ControlAppOptions): Promise<void> {
  const keys = new KeyStore(opts.store.pool);
  answerErrors(app, opts.log ?? ((): void => undefined));

  const name = (raw: string): string => {
    try {
      return checkKeyName(raw);
    } catch (err) {
      throw new LlmgwError('LLMGW_BAD_REQUEST', (err as Error).message);
    }
  };

  app.get('/v1/keys', async (): Promise<{ keys: KeyListEntry[] }> => ({ keys: await keys.list() }));

  app.post<{ Body: KeyCreateRequest }>(
    '/v1/keys',
    { schema: { body: createSchema, response: errors } },
    async (req): Promise<{ name: string }> => {
      const b = req.body;
      const spec = {
        name: name(b.name),
        models: b.models ?? null,
        rpm: b.rpm ?? null,
        tpm: b.tpm ?? null,
        expiresAt: b.expiresAt ? new Date(b.expiresAt) : null,
      };
      if (spec.expiresAt && Number.isNaN(spec.expiresAt.getTime()))
        throw new LlmgwError('LLMGW_BAD_REQUEST', `expiresAt ${JSON.stringify(b.expiresAt)} is not an ISO date-time`);
      if (spec.expiresAt && spec.expiresAt.getTime() <= Date.now())
        throw new LlmgwError('LLMGW_BAD_REQUEST', `expiresAt ${b.expiresAt} is in the past: give a future date`);
      if (spec.models) {
        // A key for a model the cluster does not know would only ever be refused: say so now.
        const known = (await opts.store.listModels()).map((m) => m.name);
        const unknown = spec.models.filter((m) => !known.includes(m));
        if (unknown.length)
          throw new LlmgwError(
            'LLMGW_UNKNOWN_MODEL',
            `no model named ${unknown.join(', ')} is deployed (known: ${known.join(', ') || 'none'}): check --models`,
          );
      }
      await keys.create(spec, b.digest, b.prefix);
      await opts.store.event({ kind: 'key-created', message: `API key ${spec.name} created` });
      return { name: spec.name };
    },
  );

  app.post<{ Params: { name: string } }>(
    '/v1/keys/:name/revoke',
    { schema: { params: nameParams, response: errors } },
    async (req): Promise<{ revoked: boolean }> => {
      const n = name(req.params.name);
      const revoked = await keys.revoke(n);
      if (revoked) await opts.store.event({ kind: 'key-revoked', message: `API key ${n} revoked` });
      return { revoked };
    },
  );

  app.get<{ Querystring: { name?: string; hours?: number } }>(
    '/v1/keys/usage',
    {
      schema: {
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            name: { type: 'string', maxLength: 64 },
            hours: { type: 'integer', minimum: 1, maximum: 24 * 90 },
          },
        },
        response: errors,
      },
    },
    async (req): Promise<{ usage: KeyUsageRow[] }> => ({
      usage: await keys.usage(req.query.name === undefined ? undefined : name(req.query.name), req.query.hours ?? 24),
    }),
  );
}
