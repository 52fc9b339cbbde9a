/**
 * The control API's catalog route (an operator certificate): `llmgw ctl apply` sends its server.yaml's catalog, the
 * control plane checks it as server.yaml is checked, plans it against the cluster and (unless a dry run) carries
 * the plan out through each model's deployment workflow.
 */
import type { FastifyInstance } from 'fastify';
import { parseServerConfig } from '../../config/load';
import { hasCode, openAiError } from '../../lib/errors';
import type { CatalogApplyAnswer, CatalogApplyRequest } from './contract';
import { answerErrors } from '../errors';
import { errorSchema } from './identity';
import type { ControlAppOptions } from './routes';

const bodySchema = {
  type: 'object',
  required: ['catalog'],
  additionalProperties: false,
  properties: {
    catalog: { type: 'array', items: { type: 'object' } },
    engines: { type: 'object', additionalProperties: { type: 'string' } },
    prune: { type: 'boolean' },
    dryRun: { type: 'boolean' },
  },
} as const;

/** Registers POST /v1/catalog/apply when the control plane can apply (it has Temporal). */
export async function catalogRoutes(app: FastifyInstance, opts: ControlAppOptions): Promise<void> {
  const { applyCatalog } = opts;
  if (!applyCatalog) return;
  answerErrors(app, opts.log ?? ((): void => undefined));
  app.post<{ Body: CatalogApplyRequest }>(
    '/v1/catalog/apply',
    { schema: { body: bodySchema, response: { 400: errorSchema } } },
    async (req, reply): Promise<CatalogApplyAnswer | undefined> => {
      let catalog;
      try {
        // Checked as server.yaml's own catalog is (names, sources, profiles against the engines named).
        catalog = parseServerConfig(
          JSON.stringify({ ...(req.body.engines ? { engines: req.body.engines } : {}), catalog: req.body.catalog }),
          'the catalog ctl apply sent',
        ).catalog;
      } catch (err) {
        if (!hasCode(err, 'LLMGW_CONFIG_INVALID')) throw err;
        return reply.code(400).send(openAiError('LLMGW_BAD_REQUEST', (err as Error).message));
      }
      return applyCatalog({ catalog, prune: req.body.prune ?? false, dryRun: req.body.dryRun ?? false });
    },
  );
}
