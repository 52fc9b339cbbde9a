/** `llmgw ctl apply [--dry-run] [--prune]`: make the cluster run server.yaml's catalog. */
import { loadServerConfig } from '../../config/load';
import type { CatalogApplyAnswer } from '../../gateway/control/contract';
import { actionLine, changes } from '../../lib/catalog';
import { parse } from '../args';
import { controlApi, postControl } from '../control-api';
import type { CtlVerb } from './verb';

const APPLY_USAGE = `
llmgw ctl apply [--dry-run] [--prune] [--config FILE] [--server URL] [--json]

Makes the cluster run server.yaml's catalog (the control plane does the same at start, without --prune):
  + a model new in the catalog is deployed (its workflow model/<m> started);
  ~ a changed replica count is applied (one changed by llmgw ctl scale since stands while the catalog's does not change);
  ~ a changed profile, source or start timeout rolls the model's replicas, make-before-break, one at a time;
  ~ a model whose deployment is not running gets it started;
  - with --prune, a model no longer in the catalog is drained (each replica waits for its requests in flight),
    stopped and forgotten; without it, it is kept and said so.

  --dry-run       say what would change; change nothing
  --prune         also remove the models the catalog no longer has
  --config FILE   server.yaml whose catalog is applied (keep it the control plane's: it applies its own at start)
  --server URL    control plane URL (default: https:// and the config's listeners.controlPlane)
  --json          the plan as JSON
`;

/** The plan as ctl apply prints it, then what it did (or, for a dry run, did not do). */
export function formatApply(a: CatalogApplyAnswer, file: string): string {
  const n = a.actions.filter(changes).length;
  const head = `${a.dryRun ? 'dry run: ' : ''}the catalog of ${file} against the cluster\n`;
  const lines = a.actions.map((x) => `${actionLine(x)}\n`).join('');
  const errors = a.errors.map((e) => `  FAILED ${e}\n`).join('');
  const tail = a.dryRun
    ? `nothing changed; llmgw ctl apply${a.actions.some((x) => x.kind === 'remove') ? ' --prune' : ''} carries out the ${n} change${n === 1 ? '' : 's'} above\n`
    : `${n - a.errors.length} of ${n} change${n === 1 ? '' : 's'} handed to the models' deployments (workflows model/<m>); llmgw ctl models follows them\n`;
  return `${head}${lines}${errors}${tail}`;
}

/** Entry for `llmgw ctl apply`. */
export async function applyCommand(
  argv: string[],
  out: (s: string) => void = (s) => process.stdout.write(s),
): Promise<void> {
  const { values } = parse(argv, {
    usage: APPLY_USAGE,
    options: {
      config: { type: 'string' },
      server: { type: 'string' },
      json: { type: 'boolean' },
      'dry-run': { type: 'boolean' },
      prune: { type: 'boolean' },
    },
  });
  const config = loadServerConfig(values.config);
  const api = controlApi(config, values.server);
  const answer = await postControl<CatalogApplyAnswer>(
    api,
    '/v1/catalog/apply',
    {
      catalog: config.catalog,
      engines: config.engines,
      prune: values.prune ?? false,
      dryRun: values['dry-run'] ?? false,
    },
    60_000,
  );
  out(
    values.json
      ? `${JSON.stringify(answer, null, 2)}\n`
      : formatApply(answer, values.config ?? 'the built-in defaults'),
  );
  if (answer.errors.length) process.exitCode = 1;
}

/** `ctl apply` (its own options and --help) */
export const applyVerb: CtlVerb = {
  help: `  apply [--dry-run] [--prune]
                              make the cluster run server.yaml's catalog: deploy new models, apply changed counts,
                              roll changed profiles make-before-break; --prune drains and removes models it dropped`,
  run: (ctx) => applyCommand(ctx.values.config ? ['--config', ctx.values.config] : [], ctx.out),
  raw: applyCommand,
};
