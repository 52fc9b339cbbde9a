/**
 * `llmgw add-node` (also `llmgw-add-node`): create the node's VM on Proxmox (provisionNode), then onboard it
 * (onboardNode), as the workflow add-node/ID, following each step in the terminal. Ctrl-C detaches; the
 * workflows go on in Temporal.
 */
import type { Client, WorkflowHandle } from '@temporalio/client';
import { loadServerConfig } from '../config/load';
import type { ServerConfig } from '../config/types';
import { QUEUES, searchAttributes, workflowIds } from '../lib/names';
import { checkNodeId } from '../lib/pki';
import { parseCidr } from '../lib/proxmox/plan';
import type { OnboardInput } from '../workflows/contracts/onboard';
import type { AddNodeInput, AddNodeResult } from '../workflows/contracts/provision';
import type { DoctorResult } from '../lib/types';
import { intOption, parse, UsageError } from './args';
import { controlApi } from './control-api';
import { ENGINE_BIN_OPTIONS, nodeBinUsage } from './engine-flags';
import {
  detachedLine,
  failureMessage,
  followOnboarding,
  followProvisioning,
  onboardedLine,
  provisionedLine,
} from './follow';
import { agentFlags, artefactRef, controlPlaneUrl, sshKeyPair } from './node-input';
import { PROVISION_FLAGS, PROVISION_OPTIONS, provisionInput } from './provision-input';
import { withTemporalClient, workflowLink } from './temporal';

const ADD_USAGE = `
llmgw add-node --name ID --ip ADDR/PREFIX --server URL --binary ARTEFACT [options]
(also: llmgw-add-node …)

Both halves in one command, as the workflow add-node/ID: provision/ID (the VM on Proxmox; see llmgw
provision-node --help), then onboard/ID (identity, agent and engine probe over ssh; see llmgw onboard-node
--help), each followed step by step. At the end a node whose CPU lacks AVX2 is flagged with the fix.
${PROVISION_FLAGS}
  --server URL            the control plane its agent registers with, e.g. https://10.0.0.140:7443
  --binary ARTEFACT       the release artefact to install (npm run release)
  --fabric NAME[:dev,dev] InfiniBand fabric of the node (repeatable)
${nodeBinUsage(26, 'probed at onboarding and offered')}
  --nvidia-smi PATH       nvidia-smi on the node (default: on its PATH)
  --no-gpu                the node has no GPU
  --ib-root PATH          sysfs root with class/infiniband on the node (default /sys)
  --no-door               the agent serves no node door: engines listen on the node's address, reached by the
                          gateways directly. Default: its door on the node's address:7460 (engines on 127.0.0.1), so
                          every gateway and control plane needs tls.gatewayCert (llmgw ca issue --gateway NAME)
  --ssh-user USER         (default root)
  --register-timeout S    how long the started agent may take to register (default 120)
  --provision-only        only the VM (the same as llmgw provision-node)
  --onboard-only          only onboarding, of a VM that exists (the same as llmgw onboard-node; --addr is
                          the address of --ip)
  --no-follow             start it and return (llmgw ctl follow add-node/ID)
  --config FILE           server.yaml: Temporal, and the proxmox section's defaults
`;

const out = (s: string): void => void process.stdout.write(s);
/** Waits until a child workflow exists (the parent starts it), then returns its handle; null when the parent ended first. */
async function childHandle(
  client: Client,
  parent: WorkflowHandle,
  workflowId: string,
  since: Date,
  signal: AbortSignal,
): Promise<WorkflowHandle | null> {
  for (;;) {
    const d = await client.workflow
      .getHandle(workflowId)
      .describe()
      .catch(() => null);
    if (d && d.startTime >= new Date(since.getTime() - 1000)) return client.workflow.getHandle(workflowId);
    if ((await parent.describe()).status.name !== 'RUNNING' || signal.aborted) return null;
    await new Promise((r) => setTimeout(r, 300));
  }
}

/** Entry for `llmgw add-node`. */
export async function addNodeCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: ADD_USAGE,
    options: {
      ...PROVISION_OPTIONS,
      server: { type: 'string' },
      binary: { type: 'string' },
      fabric: { type: 'string', multiple: true },
      ...ENGINE_BIN_OPTIONS,
      'nvidia-smi': { type: 'string' },
      'no-gpu': { type: 'boolean' },
      'ib-root': { type: 'string' },
      'no-door': { type: 'boolean' },
      'ssh-user': { type: 'string' },
      'register-timeout': { type: 'string' },
      'provision-only': { type: 'boolean' },
      'onboard-only': { type: 'boolean' },
    },
  });
  if (values['provision-only'] && values['onboard-only'])
    throw new UsageError('--provision-only and --onboard-only exclude each other: give neither for both halves');
  const required = values['provision-only'] ? ['name', 'ip'] : ['name', 'ip', 'server'];
  for (const f of required)
    if (!values[f as keyof typeof values]) throw new UsageError(`--${f} is required\n${ADD_USAGE}`);
  const config = loadServerConfig(values.config);
  const nodeId = checkNodeId(values.name as string);
  const provision = values['onboard-only'] ? null : provisionInput(values, config);
  let onboard: OnboardInput | null = null;
  if (!values['provision-only']) {
    const server = controlPlaneUrl(values.server as string);
    let addr: string;
    try {
      addr = parseCidr(values.ip as string).address;
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    const { key } = sshKeyPair(values['ssh-key']);
    onboard = {
      nodeId,
      addr,
      sshPort: 22,
      sshUser: values['ssh-user'] ?? 'root',
      sshKeyPath: key,
      server,
      advertiseHost: addr,
      ...agentFlags(values),
      artefact: await artefactRef(values.binary),
      sshDeadlineS: intOption(values['ssh-timeout'], '--ssh-timeout', 600),
      registerTimeoutS: intOption(values['register-timeout'], '--register-timeout', 120),
    };
  }
  const input: AddNodeInput = { nodeId, provision, onboard };
  await withTemporalClient(config, async (client, signal) => {
    const workflowId = workflowIds.addNode(nodeId);
    const since = new Date();
    const handle = await client.workflow.start('addNode', {
      taskQueue: QUEUES.control,
      workflowId,
      args: [input],
      workflowIdConflictPolicy: 'USE_EXISTING',
      typedSearchAttributes: [{ key: searchAttributes.node, value: [nodeId] }],
    });
    out(`adding ${nodeId}: workflow ${workflowId}\n  ${workflowLink(config, workflowId)}\n`);
    if (values['no-follow']) return;
    for (const [what, id] of [
      ...(provision ? [['provision', workflowIds.provision(nodeId)]] : []),
      ...(onboard ? [['onboard', workflowIds.onboard(nodeId)]] : []),
    ] as [string, string][]) {
      const h = await childHandle(client, handle, id, since, signal);
      if (signal.aborted) return void out(detachedLine(workflowId));
      if (!h) break;
      out(`${what}: workflow ${id}\n`);
      const r = await (
        what === 'provision' ? followProvisioning(h, { out, signal }) : followOnboarding(h, { out, signal })
      ).catch(() => 'failed' as const);
      if (r === 'detached') return void out(detachedLine(workflowId));
      if (r === 'failed') break;
      out(`${what === 'provision' ? provisionedLine(r as never) : onboardedLine(r as never)}\n`);
    }
    let result: AddNodeResult;
    try {
      result = (await handle.result()) as AddNodeResult;
    } catch (err) {
      throw new Error(failureMessage(err));
    }
    out(`${nodeId} added in ${(result.totalMs / 1000).toFixed(1)} s\n`);
    if (onboard) out(await cpuVerdict(config, nodeId, onboard.server));
  });
}

/**
 * The end of add-node: the node's CPU check as its agent reported it (llmgw doctor's cpu-flags). A node without
 * AVX2 — what a VM on kvm64 looks like — is flagged with the reason and the fix.
 */
async function cpuVerdict(config: ServerConfig, nodeId: string, server: string): Promise<string> {
  try {
    const api = controlApi(config, server);
    const res = await api.fetch(`${api.server}/v1/nodes`, { signal: AbortSignal.timeout(10_000) });
    if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`);
    const { nodes } = (await res.json()) as { nodes: { id: string; inventory: { doctor?: DoctorResult[] } }[] };
    const cpu = nodes.find((x) => x.id === nodeId)?.inventory.doctor?.find((d) => d.id === 'cpu-flags');
    if (!cpu) return `  CPU: ${nodeId} reported no CPU check (an older agent?): see llmgw ctl nodes\n`;
    if (cpu.status === 'pass') return `  CPU: ${cpu.summary}\n`;
    return `  WARNING: ${nodeId}'s CPU check ${cpu.status === 'fail' ? 'failed' : 'warns'}: ${cpu.summary}\n  fix: ${cpu.fix || 'see llmgw doctor'}\n`;
  } catch (err) {
    return `  CPU: could not read ${nodeId}'s checks from the control plane (${(err as Error).message}): see llmgw ctl nodes\n`;
  }
}
