/** `llmgw ctl …`: the operator's view of the cluster and the commands that start workflows. One file per verb. */
import { loadServerConfig } from '../../config/load';
import { parse, UsageError } from '../args';
import { controlApi } from '../control-api';
import { applyVerb } from './apply';
import { cordon, uncordon } from './cordon';
import { deploy } from './deploy';
import { drainVerb } from './drain';
import { engineCheckVerb } from './engine-check';
import { fabrics } from './fabrics';
import { follow } from './follow';
import { forgetHostKeyVerb } from './forget-host-key';
import { keysVerb } from './keys';
import { models } from './models';
import { nodes } from './nodes';
import { pageKey } from './page-key';
import { removeNodeVerb } from './remove-node';
import { replicas } from './replicas';
import { revoke } from './revoke';
import { scale } from './scale';
import { CTL_OPTIONS, type CtlVerb } from './verb';
import { weights } from './weights';

/** Every verb, in the order `llmgw ctl --help` lists them. */
const VERBS: Record<string, CtlVerb> = {
  nodes,
  fabrics,
  replicas,
  models,
  apply: applyVerb,
  deploy,
  scale,
  drain: drainVerb,
  weights,
  cordon,
  uncordon,
  revoke,
  keys: keysVerb,
  follow,
  'remove-node': removeNodeVerb,
  'forget-host-key': forgetHostKeyVerb,
  'engine-check': engineCheckVerb,
  'page-key': pageKey,
};

const COMMON = `Common options go before or after COMMAND:
  --config FILE   server.yaml (default: built-in local-cluster defaults)
  --server URL    control plane URL (default: https:// and the config's listeners.controlPlane); ctl presents
                  the operator certificate of the config's tls.clientCert / tls.clientKey
  --json          machine-readable output`;

const USAGE = `
llmgw ctl COMMAND [options]

${Object.values(VERBS)
  .map((v) => v.help)
  .join('\n')}

${COMMON}
`;

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
  const chosen = verb !== undefined && Object.hasOwn(VERBS, verb) ? VERBS[verb] : undefined;
  if (chosen?.raw) return chosen.raw(rest, out); // its own options and --help
  // `llmgw ctl --help` (no verb) teaches like `llmgw ctl nodes --help` does.
  const { values, positionals } = parse(rest, { usage: USAGE, allowPositionals: true, options: CTL_OPTIONS });
  const config = loadServerConfig(values.config);
  if (!chosen)
    throw new UsageError(
      verb ? `unknown command "ctl ${verb}"\n${USAGE}` : `ctl needs a COMMAND, e.g. llmgw ctl nodes\n${USAGE}`,
    );
  await chosen.run({
    verb: verb as string,
    config,
    api: controlApi(config, values.server),
    values,
    positionals,
    out,
    usage: USAGE,
  });
}
