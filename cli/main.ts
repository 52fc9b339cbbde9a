/** The llmgw command tree. This file only wires commands; each verb lives in its own module. */
import { UsageError } from './args';

const USAGE = `
llmgw — a self-hosted LLM inference cluster behind one OpenAI-compatible gateway

  llmgw cluster          bring up the local cluster (Temporal, control plane, gateway, 3 sim nodes)
  llmgw ctl COMMAND      nodes | replicas | deploy | scale | drain | uncordon …  (llmgw ctl --help)
  llmgw ca COMMAND       the cluster CA: init | issue | issue-server | crl   (llmgw ca --help)
  llmgw db COMMAND       the MySQL schema and users: migrate | status | grants ROLE   (llmgw db --help)
  llmgw init ROLE        write a role's commented server.yaml and check what it reaches (llmgw init --help)
  llmgw control-plane    run the control plane API and the control worker
  llmgw ca-worker        run the llmgw-ca worker beside the CA key (llmgw ca-worker --help)
  llmgw onboard-node     give a machine its identity and agent over ssh (llmgw onboard-node --help)
  llmgw provision-node   create a node's VM on Proxmox (llmgw provision-node --help)
  llmgw add-node         both: create the VM, then onboard it (llmgw add-node --help)
  llmgw proxmox-worker   run the llmgw-proxmox worker, the one holder of the Proxmox API token
  llmgw gateway          run the inference gateway
  llmgw agent            run the node agent (llmgw agent --help)
  llmgw doctor           check what this node lacks before it joins (llmgw doctor --help)
  llmgw sim-engine       run the simulated inference engine
  llmgw sim-fleet        many simulated nodes in one process, each a real agent (llmgw sim-fleet --help)
  llmgw bench URL        load any OpenAI-compatible URL: TTFT, ITL, req/s, tokens/s, goodput (llmgw bench --help)
  llmgw version

Every command takes --help.
`;

/* eslint-disable @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports -- commands load lazily (require: the CLI runs as CommonJS under tsx) */
const COMMANDS: Record<string, () => Promise<(argv: string[]) => Promise<void>>> = {
  cluster: async () => (require('./cluster/command') as typeof import('./cluster/command')).clusterCommand,
  ctl: async () => (argv) => (require('./ctl/index') as typeof import('./ctl/index')).ctlCommand(argv),
  ca: async () => (argv) => (require('./ca') as typeof import('./ca')).caCommand(argv),
  db: async () => (argv) => (require('./db') as typeof import('./db')).dbCommand(argv),
  init: async () => (argv) => (require('./init') as typeof import('./init')).initCommand(argv),
  'control-plane': async () => (require('./control-plane') as typeof import('./control-plane')).controlPlaneCommand,
  'ca-worker': async () => (require('./ca-worker') as typeof import('./ca-worker')).caWorkerCommand,
  gateway: async () => (require('./gateway') as typeof import('./gateway')).gatewayCommand,
  agent: async () => (require('./agent') as typeof import('./agent')).agentCommand,
  doctor: async () => (argv) => (require('./doctor') as typeof import('./doctor')).doctorCommand(argv),
  'sim-fleet': async () => (require('./sim-fleet') as typeof import('./sim-fleet')).simFleetCommand,
  'sim-engine': async () => (require('./sim-engine') as typeof import('./sim-engine')).main,
  bench: async () => (require('./bench') as typeof import('./bench')).benchCommand,
  'onboard-node': async () => (argv) => (require('./onboard') as typeof import('./onboard')).onboardNodeCommand(argv),
  'provision-node': async () => (argv) =>
    (require('./provision-node') as typeof import('./provision-node')).provisionNodeCommand(argv),
  'add-node': async () => (argv) => (require('./add-node') as typeof import('./add-node')).addNodeCommand(argv),
  'proxmox-worker': async () => (require('./proxmox-worker') as typeof import('./proxmox-worker')).proxmoxWorkerCommand,
  // Node-side helpers onboarding and the agent run (not in the usage above).
  'engine-probe': async () => (argv) =>
    (require('./engine-probe') as typeof import('./engine-probe')).engineProbeCommand(argv),
  'node-door': async () => async (argv) => (require('./node-door') as typeof import('./node-door')).nodeDoorMain(argv),
  'engine-shim': async () => async (argv) =>
    (require('./engine-shim') as typeof import('./engine-shim')).engineShimMain(argv),
  version: async () => async () => {
    const pkg = require('../package.json') as { version: string; dependencies: Record<string, string> };
    const r = (require('../lib/release') as typeof import('../lib/release')).release();
    const compiled = (require('../lib/paths') as typeof import('../lib/paths')).COMPILED;
    const from = r
      ? `release ${r.platform}, commit ${r.commit}, built ${r.builtAt}`
      : `checkout${compiled ? ', compiled build' : ''}`;
    process.stdout.write(
      `llmgw ${pkg.version} (${from}; Temporal SDK ${pkg.dependencies['@temporalio/client']}, Node ${process.version})\n`,
    );
  },
};
/* eslint-enable @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports */

/** Runs the command named by argv[0]. */
export async function main(argv: string[]): Promise<void> {
  const [name, ...rest] = argv;
  const load = name ? COMMANDS[name] : undefined;
  if (!load) {
    process.stdout.write(USAGE.trimStart());
    if (name && name !== '--help' && name !== '-h') {
      process.stderr.write(`\nunknown command "${name}"\n`);
      process.exitCode = 2;
    }
    return;
  }
  await (
    await load()
  )(rest);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  const e = err as Error & { code?: string };
  if (e instanceof UsageError || e.name === 'UsageError') {
    process.stderr.write(`llmgw: ${e.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`llmgw: ${e.code ? `${e.code}: ` : ''}${e.message}\n`);
  process.exit(1);
});
