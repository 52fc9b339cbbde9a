/** `llmgw ctl …`: the operator's view of the cluster and the commands that start workflows. */
import { Client, Connection } from '@temporalio/client';
import { loadServerConfig } from '../config/load';
import type { ServerConfig } from '../config/types';
import { QUEUES, searchAttributes, workflowIds } from '../lib/names';
import { doctorColumn } from '../lib/doctor';
import { checkNodeId } from '../lib/pki/node-id';
import type { NodeRecord, ReplicaRecord } from '../lib/types';
import type { NodeCertificate } from '../gateway/control/routes';
import type { WeightCopy } from '../lib/store/weights';
import { scaleUpdate, type ModelDeploymentInput } from '../workflows/contracts/model';
import { intOption, parse, UsageError } from './args';
import { controlApi, type ControlApi } from './control-api';
import { drain, setCordon } from './drain';
import { engineCheckCommand } from './engine-check';
import { fabricColumn, fabricsView, formatFabrics } from './fabrics';
import { followWorkflow } from './follow';
import { forgetHostKey } from './host-keys';
import { revokeNode } from './revoke';
import { formatFetch, formatWeights, weightsFetches } from './weights';
import { table, ago } from './table';

const COMMON = `  --config FILE   server.yaml (default: built-in local-cluster defaults)
  --server URL    control plane URL (default: https:// and the config's listeners.controlPlane); ctl presents
                  the operator certificate of the config's tls.clientCert / tls.clientKey
  --json          machine-readable output`;

const USAGE = `
llmgw ctl COMMAND [options]

  nodes                       nodes: state, GPUs used/total, fabrics (marked when a name covers two subnet
                              managers or its SM was not read), engines, replicas, failing doctor checks, last seen
  fabrics                     each fabric: its nodes, subnet manager (SM GUID), adapters and warnings; islands last
  replicas [--model M]        replicas: state (and why, when waiting), nodes, endpoint
  models                      catalog models and their desired replicas
  deploy MODEL [--replicas N] [--no-wait] [--timeout S]
                              start (or join) the model's deployment workflow; waits until its replicas serve
  scale MODEL N               set the model's desired replicas
  drain NODE [--timeout S] [--no-wait]
                              cordon NODE and move its replicas elsewhere, one at a time, each replacement
                              serving before its original stops (workflow drain/NODE; running it again joins it)
  weights                     weights fetches under way (node, bytes, total, rate, from a peer or the origin) and
                              the files each node's cache holds
  cordon NODE                 NODE takes no new replicas (those on it keep running)
  uncordon NODE               NODE takes replicas again
  revoke NODE [--reason TEXT] revoke every certificate of NODE: the control plane refuses it at once, open
                              connections included, and it cannot register again (docs/identity.md)
  follow WORKFLOW-ID          follow a workflow in the terminal (onboard/NODE step by step) until it ends; Ctrl-C
                              detaches, the workflow goes on
  forget-host-key NODE        forget the ssh host keys onboarding learned for NODE, when the machine was rebuilt on
                              purpose (server.yaml's mysql: run it on the CA host)
  engine-check ENGINE [--help-output FILE | --bin PATH]
                              check every flag llmgw would give ENGINE (llamacpp, vllm, sglang) against its help

${COMMON}
`;

type NodeRow = NodeRecord & { replicas: string[]; gpusUsed: number; cert?: NodeCertificate | null };

async function getJson<T>(api: ControlApi, url: string): Promise<T> {
  let res: Response;
  try {
    res = await api.fetch(url, { signal: AbortSignal.timeout(10_000) });
  } catch (err) {
    if (err instanceof UsageError) throw err; // e.g. the operator certificate is missing
    throw new UsageError(`cannot reach the control plane at ${new URL(url).origin} (${(err as Error).message}): is it running? pass --server URL`);
  }
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

/** The Temporal UI page of a workflow. */
export function uiLink(config: ServerConfig, workflowId: string): string {
  return `${config.temporal.uiUrl}/namespaces/${config.temporal.namespace}/workflows/${encodeURIComponent(workflowId)}`;
}

async function temporalClient(config: ServerConfig): Promise<{ client: Client; close: () => Promise<void> }> {
  const connection = await Connection.connect({ address: config.temporal.address, connectTimeout: 5000 }).catch((err: Error) => {
    throw new UsageError(`cannot reach Temporal at ${config.temporal.address} (${err.message}): is it running? check temporal.address in server.yaml`);
  });
  return { client: new Client({ connection, namespace: config.temporal.namespace }), close: () => connection.close() };
}

/** The CERT cell: loud when the agent missed its renewal window (two thirds of the lifetime) or the certificate expired. */
export function certColumn(c: NodeCertificate | null | undefined, now = Date.now()): string {
  if (!c) return '-';
  if (c.revoked) return 'revoked';
  const notAfter = Date.parse(c.notAfter);
  if (now >= notAfter) return `EXPIRED ${ago(notAfter, now)}`;
  if (now >= Date.parse(c.renewAt)) return `RENEW OVERDUE (expires ${c.notAfter.slice(0, 10)})`;
  return `ok until ${c.notAfter.slice(0, 10)}`;
}

/**
 * Renders the node list as a table; CHECKS names the node's failing and warning doctor checks (`llmgw doctor` on
 * it says more), CERT its certificate (renewal overdue, expired).
 */
export function formatNodes(nodes: NodeRow[], now = Date.now()): string {
  const rows = table(['NODE', 'STATE', 'GPUS', 'FABRIC', 'ENGINES', 'REPLICAS', 'CHECKS', 'CERT', 'LAST SEEN'], nodes.map((n) => [
    n.id, n.state, `${n.gpusUsed}/${n.inventory.gpus.length}`, fabricColumn(n, nodes),
    engineColumn(n), n.replicas.join(',') || '-', doctorColumn(n.inventory.doctor), certColumn(n.cert, now),
    n.lastSeen ? ago(new Date(n.lastSeen).getTime(), now) : 'never',
  ]));
  // Why an engine is not offered, in the engine's own words: the table cell only says that it failed.
  const failed = nodes.flatMap((n) => (n.engineStatus ?? []).filter((s) => s.state === 'failed').map((s) => `${n.id}: ${s.engine} ${s.version || ''} not offered: ${s.reason ?? 'unknown'}`.replace('  ', ' ')));
  return failed.length ? `${rows}\n${failed.map((f) => f.split('\n').map((l, i) => (i ? `    ${l}` : l)).join('\n')).join('\n')}\n` : rows;
}

/** The ENGINES cell: each engine with its version, FAILED for one that did not pass (reasons below the table). */
export function engineColumn(n: Pick<NodeRow, 'engineStatus' | 'inventory'>): string {
  if (!n.engineStatus) return n.inventory.engines.length ? `${n.inventory.engines.join(',')} (not probed yet)` : 'probing…';
  const cells = n.engineStatus.filter((s) => s.state !== 'skipped').map((s) => `${s.engine} ${s.version || '?'}${s.state === 'failed' ? ' FAILED' : ''}`);
  return cells.join(', ') || 'none';
}

/** Renders the replica list as a table. */
export function formatReplicas(replicas: ReplicaRecord[]): string {
  return table(['REPLICA', 'MODEL', 'STATE', 'NODES', 'ENDPOINT', 'REASON'], replicas.map((r) => [
    r.id, r.model, r.state, r.shards.map((s) => `${s.nodeId}#${s.rank}`).join(',') || '-', r.endpoint ?? '-', r.reason ?? '',
  ]));
}

/** Entry for `llmgw ctl`. */
export async function ctlCommand(argv: string[], out: (s: string) => void = (s) => process.stdout.write(s)): Promise<void> {
  const [verb, ...rest] = argv;
  if (verb === 'engine-check') return engineCheckCommand(rest, out); // its own options and --help
  // `llmgw ctl --help` (no verb) teaches like `llmgw ctl nodes --help` does.
  const { values, positionals } = parse(verb?.startsWith('-') ? argv : rest, {
    usage: USAGE,
    allowPositionals: true,
    options: {
      config: { type: 'string' }, server: { type: 'string' }, json: { type: 'boolean' }, model: { type: 'string' },
      replicas: { type: 'string' }, 'no-wait': { type: 'boolean' }, timeout: { type: 'string' }, reason: { type: 'string' },
    },
  });
  const config = loadServerConfig(values.config);
  const api = controlApi(config, values.server);
  switch (verb) {
    case 'nodes': {
      const { nodes } = await getJson<{ nodes: NodeRow[] }>(api, `${api.server}/v1/nodes`);
      out(values.json ? `${JSON.stringify(nodes, null, 2)}\n` : formatNodes(nodes));
      return;
    }
    case 'fabrics': {
      const { nodes } = await getJson<{ nodes: NodeRow[] }>(api, `${api.server}/v1/nodes`);
      const view = fabricsView(nodes);
      out(values.json ? `${JSON.stringify(view, null, 2)}\n` : formatFabrics(view));
      return;
    }
    case 'replicas': {
      const q = values.model ? `?model=${encodeURIComponent(values.model)}` : '';
      const { replicas } = await getJson<{ replicas: ReplicaRecord[] }>(api, `${api.server}/v1/replicas${q}`);
      out(values.json ? `${JSON.stringify(replicas, null, 2)}\n` : formatReplicas(replicas));
      return;
    }
    case 'models': {
      const { models } = await getJson<{ models: { name: string; replicas: number; profiles: { name: string; engine: string; nodes: number }[] }[] }>(api, `${api.server}/v1/models`);
      out(values.json ? `${JSON.stringify(models, null, 2)}\n` : table(['MODEL', 'DESIRED', 'PROFILE'], models.map((m) => [m.name, String(m.replicas), m.profiles.map((p) => `${p.name} (${p.engine}, ${p.nodes} node${p.nodes > 1 ? 's' : ''})`).join(' ')])));
      return;
    }
    case 'weights': {
      const { copies } = await getJson<{ copies: WeightCopy[] }>(api, `${api.server}/v1/weights`);
      const { client, close } = await temporalClient(config);
      try {
        const fetches = await weightsFetches(client, { model: values.model });
        out(values.json ? `${JSON.stringify({ fetches, copies }, null, 2)}
` : formatWeights(fetches, copies));
      } finally {
        await close();
      }
      return;
    }
    case 'deploy':
    case 'scale': {
      const model = positionals[0];
      if (!model) throw new UsageError(`ctl ${verb} needs a MODEL\n${USAGE}`);
      if (verb === 'scale' && positionals[1] === undefined) throw new UsageError(`ctl scale needs MODEL N, e.g. llmgw ctl scale ${model} 3`);
      const replicas = verb === 'scale' ? intOption(positionals[1], 'N', 0) : values.replicas === undefined ? undefined : intOption(values.replicas, '--replicas', 0);
      await deploy(config, api, { model, replicas, wait: !values['no-wait'], timeoutS: intOption(values.timeout, '--timeout', 300), out });
      return;
    }
    case 'drain':
    case 'cordon':
    case 'uncordon': {
      const nodeId = positionals[0];
      if (!nodeId) throw new UsageError(`ctl ${verb} needs a NODE, e.g. llmgw ctl ${verb} sim-a`);
      if (verb !== 'drain') return setCordon(api, nodeId, verb, out);
      const timeoutS = values.timeout === undefined ? null : intOption(values.timeout, '--timeout', 1);
      const { client, close } = await temporalClient(config);
      try {
        await drain(client, { nodeId: checkNodeId(nodeId), timeoutS, wait: !values['no-wait'], uiLink: uiLink(config, workflowIds.drain(nodeId)), out });
      } finally {
        await close();
      }
      return;
    }
    case 'follow': {
      const workflowId = positionals[0];
      if (!workflowId) throw new UsageError('ctl follow needs a WORKFLOW-ID, e.g. llmgw ctl follow onboard/gpu-01');
      const { client, close } = await temporalClient(config);
      const detach = new AbortController();
      const onSigint = (): void => detach.abort();
      process.on('SIGINT', onSigint);
      try {
        await followWorkflow(client, workflowId, { out, signal: detach.signal, uiLink: uiLink(config, workflowId) });
      } finally {
        process.off('SIGINT', onSigint);
        await close();
      }
      return;
    }
    case 'forget-host-key': {
      const nodeId = positionals[0];
      if (!nodeId) throw new UsageError('ctl forget-host-key needs a NODE, e.g. llmgw ctl forget-host-key gpu-01');
      await forgetHostKey(config, nodeId, out);
      return;
    }
    case 'revoke': {
      const nodeId = positionals[0];
      if (!nodeId) throw new UsageError('ctl revoke needs a NODE, e.g. llmgw ctl revoke sim-a');
      return revokeNode(api, nodeId, values.reason, out);
    }
    default:
      throw new UsageError(verb ? `unknown command "ctl ${verb}"\n${USAGE}` : `ctl needs a COMMAND, e.g. llmgw ctl nodes\n${USAGE}`);
  }
}

/** Starts or joins `model/<m>`, applies a scale, and follows the replicas until they all serve. */
async function deploy(config: ServerConfig, api: ControlApi, o: { model: string; replicas: number | undefined; wait: boolean; timeoutS: number; out: (s: string) => void }): Promise<void> {
  const { models } = await getJson<{ models: { name: string }[] }>(api, `${api.server}/v1/models`);
  if (!models.some((m) => m.name === o.model)) {
    throw new UsageError(`model "${o.model}" is not in the catalog (known: ${models.map((m) => m.name).join(', ') || 'none'}): add it to server.yaml's catalog and restart the control plane`);
  }
  const { client, close } = await temporalClient(config);
  try {
    const workflowId = workflowIds.model(o.model);
    const handle = await client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control, workflowId, args: [{ model: o.model } satisfies ModelDeploymentInput],
      workflowIdConflictPolicy: 'USE_EXISTING', typedSearchAttributes: [{ key: searchAttributes.model, value: o.model }],
    });
    o.out(`workflow ${workflowId}\n  ${uiLink(config, workflowId)}\n`);
    if (o.replicas !== undefined) {
      await handle.executeUpdate(scaleUpdate, { args: [o.replicas] });
      o.out(`desired replicas: ${o.replicas}\n`);
    }
    if (!o.wait) return;
    await followReplicas(api, o.model, o.timeoutS * 1000, o.out, () => weightsFetches(client, { model: o.model }).then((fs) => fs.map((f) => formatFetch(f))));
  } finally {
    await close();
  }
}

/** Prints each replica's state as it changes until all desired replicas are ready; fails on timeout. */
async function followReplicas(api: ControlApi, model: string, timeoutMs: number, out: (s: string) => void, weights?: () => Promise<string[]>): Promise<void> {
  const seen = new Map<string, string>();
  let weightsAt = 0;
  const weightsSeen = new Set<string>();
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const [{ models }, { replicas }] = await Promise.all([
      getJson<{ models: { name: string; replicas: number }[] }>(api, `${api.server}/v1/models`),
      getJson<{ replicas: ReplicaRecord[] }>(api, `${api.server}/v1/replicas?model=${encodeURIComponent(model)}`),
    ]);
    const live = replicas.filter((r) => r.state !== 'stopped');
    for (const r of live) {
      const line = `${r.state}${r.reason ? ` — ${r.reason}` : ''}`;
      if (seen.get(r.id) !== line) out(`  ${r.id}: ${line}\n`);
      seen.set(r.id, line);
    }
    // Weights being fetched for a starting replica: a line every few seconds while it goes on.
    if (weights && live.some((r) => r.state === 'starting') && Date.now() - weightsAt >= 3000) {
      weightsAt = Date.now();
      for (const line of await weights().catch(() => [])) {
        if (!weightsSeen.has(line)) out(`  weights ${line}
`);
        weightsSeen.add(line);
      }
    }
    const desired = models.find((m) => m.name === model)?.replicas ?? 0;
    const ready = live.filter((r) => r.state === 'ready').length;
    if (ready === desired && live.length === desired) {
      out(`${model}: ${ready} of ${desired} replicas ready\n`);
      return;
    }
    if (Date.now() > deadline) throw new Error(`${model}: ${ready} of ${desired} replicas ready after ${timeoutMs / 1000}s; see the reasons above and in the Temporal UI (the deployment keeps trying)`);
    await new Promise((r) => setTimeout(r, 500));
  }
}
