/** `llmgw ctl …`: the operator's view of the cluster and the commands that start workflows. One file per verb. */
import { loadServerConfig } from '../../config/load';
import { parse, UsageError } from '../args';
import { controlApi } from '../control-api';
import { CTL_OPTIONS, type CtlVerb } from './verb';

/**
 * Every verb, in the order `llmgw ctl --help` lists them, loaded when it is the one asked for: `ctl nodes` should
 * not pay for loading what `ctl deploy` or `ctl drain` need (Temporal's client, the doctor) — the CLI's start time
 * is most of what an operator waits for (docs/operations.md, "The compiled build").
 */
/* eslint-disable @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports -- verbs load lazily, as cli/main.ts's commands do */
const VERBS: Record<string, () => CtlVerb> = {
  nodes: () => (require('./nodes') as typeof import('./nodes')).nodes,
  fabrics: () => (require('./fabrics') as typeof import('./fabrics')).fabrics,
  replicas: () => (require('./replicas') as typeof import('./replicas')).replicas,
  models: () => (require('./models') as typeof import('./models')).models,
  apply: () => (require('./apply') as typeof import('./apply')).applyVerb,
  deploy: () => (require('./deploy') as typeof import('./deploy')).deploy,
  scale: () => (require('./scale') as typeof import('./scale')).scale,
  drain: () => (require('./drain') as typeof import('./drain')).drainVerb,
  weights: () => (require('./weights') as typeof import('./weights')).weights,
  cordon: () => (require('./cordon') as typeof import('./cordon')).cordon,
  uncordon: () => (require('./cordon') as typeof import('./cordon')).uncordon,
  revoke: () => (require('./revoke') as typeof import('./revoke')).revoke,
  keys: () => (require('./keys') as typeof import('./keys')).keysVerb,
  follow: () => (require('./follow') as typeof import('./follow')).follow,
  'remove-node': () => (require('./remove-node') as typeof import('./remove-node')).removeNodeVerb,
  'forget-host-key': () => (require('./forget-host-key') as typeof import('./forget-host-key')).forgetHostKeyVerb,
  'engine-check': () => (require('./engine-check') as typeof import('./engine-check')).engineCheckVerb,
  'page-key': () => (require('./page-key') as typeof import('./page-key')).pageKey,
};
/* eslint-enable @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports */

const COMMON = `Common options go before or after COMMAND:
  --config FILE   server.yaml (default: built-in local-cluster defaults)
  --server URL    control plane URL (default: https:// and the config's listeners.controlPlane); ctl presents
                  the operator certificate of the config's tls.clientCert / tls.clientKey
  --json          machine-readable output`;

let usageText: string | undefined;

/** `llmgw ctl --help`: every verb's lines (which loads every verb: only for help and errors that teach). */
function usage(): string {
  usageText ??= `
llmgw ctl COMMAND [options]

${Object.values(VERBS)
  .map((load) => load().help)
  .join('\n')}

${COMMON}
`;
  return usageText;
}

/**
 * Where the verb is in `argv`: the first word that is neither an option nor an option's value, so the common
 * options may come before it (`ctl --config F nodes`) as well as after; -1 when there is none.
 */
export function verbIndex(argv: string[]): number {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (!a.startsWith('-')) return i;
    const name = a.replace(/^--?/, '');
    if (!a.includes('=') && (CTL_OPTIONS as Record<string, { type: string }>)[name]?.type === 'string') i++;
  }
  return -1;
}

/** Entry for `llmgw ctl`. */
export async function ctlCommand(
  argv: string[],
  out: (s: string) => void = (s) => process.stdout.write(s),
): Promise<void> {
  const at = verbIndex(argv);
  const verb = at < 0 ? undefined : argv[at];
  const rest = at < 0 ? argv : [...argv.slice(0, at), ...argv.slice(at + 1)];
  const chosen = verb !== undefined && Object.hasOwn(VERBS, verb) ? VERBS[verb]!() : undefined;
  if (chosen?.raw) return chosen.raw(rest, out); // its own options and --help
  // `llmgw ctl --help` (no verb) teaches like `llmgw ctl nodes --help` does.
  const { values, positionals } = parse(rest, {
    get usage() {
      return usage();
    },
    allowPositionals: true,
    options: CTL_OPTIONS,
  });
  const config = loadServerConfig(values.config);
  if (!chosen)
    throw new UsageError(
      verb ? `unknown command "ctl ${verb}"\n${usage()}` : `ctl needs a COMMAND, e.g. llmgw ctl nodes\n${usage()}`,
    );
  await chosen.run({
    verb: verb as string,
    config,
    api: controlApi(config, values.server),
    values,
    positionals,
    out,
    get usage() {
      return usage();
    },
  });
}
